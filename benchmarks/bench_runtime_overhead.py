"""d5pipe's timing of a level-1 runtime against a bare loop over the same session and input.

For each runtime (PyTorch eager, ONNX Runtime, OpenVINO; d5pipe.levels.level1.runtimes) one small
CNN-sized MLP is prepared once, as a level-1 point prepares it, and then, interleaved over rounds:
``d5pipe.measure.timer.measure`` of one batch's inference, and a bare ``time.perf_counter`` loop
over the same callable and the same input, timed the same way: blocks of as many back-to-back calls
as d5pipe's timer put in one block in that round, the median of the blocks' per-call times (the same
estimator on both sides, so the ratio is d5pipe's own cost: its clock, synchronisation and
bookkeeping, not the difference between a mean and a median of a runtime's jittery calls). Prints each runtime's
median per-call latency both ways and the ratio d5pipe / bare (median of the per-round ratios with
its 95% CI). Deep500 calls its own overhead negligible; the target here is a ratio within 2%.

Usage: python benchmarks/bench_runtime_overhead.py [--rounds 15] [--batch 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from d5pipe.levels.level1.runtimes import onnx_runtimes, torch_runtime
from d5pipe.levels.level1.runtimes.contract import Engine
from d5pipe.measure.stats import median_ci
from d5pipe.measure.timer import measure

TIMER = {"warmup_s": 0.05, "min_block_s": 0.01, "budget_s": 0.5, "target_ci_pct": 1.0}


def _bare(fn: Callable[[], object], reps: int, seconds: float) -> float:
    """Median per-call time of blocks of ``reps`` back-to-back calls, blocks for about ``seconds``."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).eval()
    x = torch.randn(args.batch, 3, 32, 32)
    worst = widest = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        makes: tuple[Callable[[], Engine], ...] = (torch_runtime.make, onnx_runtimes.make_onnxruntime,
                                                    onnx_runtimes.make_openvino)
        for make in makes:
            runtime = make()
            prepared = runtime.prepare(model, x, args.threads, Path(tmp))

            def call(run: Callable[[torch.Tensor], torch.Tensor] = prepared.run) -> None:
                with torch.inference_mode():
                    run(x)

            ratios, d5, bare = [], [], []
            reps = measure(call, TIMER, "cpu").calls_per_block  # warm both up; the block size d5pipe picks
            for r in range(args.rounds):
                if r % 2:  # alternate which goes first, so drift does not favour one side
                    b = _bare(call, reps, TIMER["budget_s"])
                    m = measure(call, TIMER, "cpu")
                else:
                    m = measure(call, TIMER, "cpu")
                    b = _bare(call, m.calls_per_block, TIMER["budget_s"])
                reps = m.calls_per_block
                d5.append(m.median)
                bare.append(b)
                ratios.append(m.median / b)
            ci = median_ci(ratios, 0.95)
            ratio = statistics.median(ratios)
            worst = max(worst, abs(ratio - 1.0))
            widest = max(widest, ratio - ci.low, ci.high - ratio)
            print(f"{runtime.name:12s} d5pipe {statistics.median(d5) * 1e6:9.1f} us  bare {statistics.median(bare) * 1e6:9.1f} us"
                  f"  ratio {ratio:.4f} [{ci.low:.4f}, {ci.high:.4f}] over {args.rounds} rounds")
    print(f"largest |ratio - 1|: {worst:.2%} ({'PASS' if worst <= 0.02 else 'FAIL'}: target 2%, on the medians); "
          f"the CIs are up to ±{widest:.1%} wide: {'resolved' if widest <= 0.02 else 'this run cannot resolve a difference that small; more --rounds narrow it'}")
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    raise SystemExit(main())
