"""d5pipe's own p90 latency against MLPerf LoadGen's SingleStream p90, on the same runtime and network.

One level-1 point, run in this process (d5pipe.levels.level1.point.run_point) twice per round,
the order alternating between rounds so that drift does not favour one side:

* ``level1.scenario: none``: d5pipe's timer (warm-up, then blocks of calls); its p90 is the 90th
  percentile of the point's raw samples ``inference_latency_s``, each the time of one call at these
  settings (``timer.min_block_s`` is set below one call, so a block is one call);
* ``level1.scenario: single_stream``: LoadGen issues one query (one batch) after another to the same
  runtime (d5pipe.levels.level1.loadgen); its p90 is LoadGen's ``result_90.00_percentile_latency_ns``.

Both sides build the same network with the same seeded weights, the same batch size and threads.
Prints each round's two p90s and their ratio LoadGen / d5pipe, and the median ratio over the rounds;
the issue's must-show is agreement within 10%.

Usage: python benchmarks/bench_loadgen_p90.py [--model resnet50] [--runtime torch] [--rounds 3]
       [--batch 1] [--threads 1] [--seconds 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.levels.contract import PointContext
from d5pipe.levels.level1.point import run_point

TARGET = 0.10


def _dataset(model: str) -> dict[str, Any]:
    """An image dataset the size of ImageNet's inputs for the zoo's CNNs, else digits."""
    if model in ("resnet50", "vit_b16"):
        return {"name": "synthetic_images", "image_shape": [3, 224, 224], "n_samples": 64, "n_classes": 1000}
    return {"name": "digits"}


def _point(root: Path, args: argparse.Namespace, scenario: str, k: int) -> dict[str, Any]:
    """One point's metrics and raw samples (its LoadGen logs under ``root/mlperf``)."""
    level1 = {"runtime": args.runtime, "batch_size": args.batch, "fwd_bwd": False, "measure_memory": False,
              "peak": False, "output_check": False, "scenario": scenario,
              "loadgen_min_duration_s": args.seconds, "loadgen_max_duration_s": 10 * args.seconds,
              "loadgen_min_query_count": args.queries}
    timer = {"warmup_s": 1.0, "warmup_max_iters": 5, "min_block_s": 1e-5, "budget_s": args.seconds,
             "target_ci_pct": 0.01, "min_samples": 10, "max_samples": 100000}
    cfg = {"name": "bench", "seed": 54, "model": {"name": args.model}, "dataset": _dataset(args.model),
           "level1": level1, "timer": timer}
    ctx = PointContext("bench", "level1", f"{scenario}-{k}", {}, cfg, 54, root, root / "work" / f"{scenario}-{k}",
                       root / "data", {}, mlperf_dir=root / "mlperf")
    out = run_point(ctx)
    return {"metrics": {m.name: m.value for m in out.metrics}, "samples": out.samples, "extra": out.extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="model.name: a built-in (mlp, cnn, transformer) or a zoo model")
    ap.add_argument("--runtime", default="torch", help="level1.runtime (torch, onnxruntime, openvino, compile)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (2 threads on a 2-core machine stall on anything else running)")
    ap.add_argument("--seconds", type=float, default=4.0, help="each side's measuring time (timer budget, LoadGen's "
                                                               "minimum duration)")
    ap.add_argument("--queries", type=int, default=64, help="LoadGen's minimum query count (64: its early "
                                                            "stopping's least for a 90th percentile)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.model} on {args.runtime}, batch {args.batch}, {args.threads} threads, {args.rounds} rounds")
    print(f"{'round':>5} {'first':>13} {'d5pipe p90':>12} {'n':>5} {'LoadGen p90':>12} {'n':>5} {'valid':>6} {'ratio':>7}")
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        for k in range(args.rounds):
            order = ("none", "single_stream") if k % 2 == 0 else ("single_stream", "none")
            got = {scenario: _point(root, args, scenario, k) for scenario in order}
            samples = got["none"]["samples"]["inference_latency_s"]
            ours = float(np.percentile(samples, 90))
            lg = got["single_stream"]["metrics"]
            theirs = float(lg["loadgen_latency_p90"])
            ratios.append(theirs / ours)
            print(f"{k:>5} {order[0]:>13} {ours * 1e3:>9.3f} ms {len(samples):>5} {theirs * 1e3:>9.3f} ms "
                  f"{lg['loadgen_query_count']:>5} {lg['loadgen_valid']:>6} {ratios[-1]:>7.3f}")
        ratio = statistics.median(ratios)
        ok = abs(ratio - 1.0) <= TARGET
        print(f"median ratio LoadGen / d5pipe: {ratio:.3f} over {args.rounds} rounds (range {min(ratios):.3f} to "
              f"{max(ratios):.3f}); {'PASS' if ok else 'FAIL'}: target within {TARGET:.0%}; "
              f"{time.perf_counter() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
