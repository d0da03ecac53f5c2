"""Record real run-to-run noise on this machine: one level-0 operator timed by d5pipe's timer in
many separate processes, grouped into "runs" of ``--repetitions`` processes each (as a d5pipe run
measures a point in ``repetitions`` shard jobs), one after the other.

The output (JSON: per process, the median of its samples, in the order measured; the machine, the
date and the torch version) is what ``tests/test_history_detect.py`` draws its synthetic histories
from: a history's noise is the noise between runs, and it is measured, not modelled.

    python benchmarks/record_run_noise.py --runs 40 --out tests/data/run_noise.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

CHILD = """
import json, sys, torch
from d5pipe.measure.timer import measure
torch.set_num_threads(1)
n = int(sys.argv[1])
g = torch.Generator().manual_seed(0)
a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
m = measure(lambda: torch.mm(a, b), {"budget_s": 0.5}, "cpu")
print(json.dumps({"median_s": m.median, "samples": len(m.samples)}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--out", type=Path, default=Path("tests/data/run_noise.json"))
    args = ap.parse_args(argv)
    import torch

    series: dict[str, list[list[float]]] = {f"matmul{n}": [] for n in args.sizes}
    t0 = time.perf_counter()
    for _ in range(args.runs):
        for n in args.sizes:
            reps = []
            for _ in range(args.repetitions):
                out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True,
                                     check=True)
                reps.append(json.loads(out.stdout)["median_s"])
            series[f"matmul{n}"].append(reps)
    doc = {"schema_version": 1, "what": "per run, the median seconds of each repetition (one process each)",
           "recorded": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
           "torch": torch.__version__, "runs": args.runs, "repetitions": args.repetitions, "series": series}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    import numpy as np
    for name, runs in series.items():
        logs = np.log([float(np.median(r)) for r in runs])
        within = float(np.median([np.std(np.log(r), ddof=1) for r in runs]))
        print(f"{name}: between-run sd of log median {np.std(logs, ddof=1):.3f}, "
              f"median within-run sd {within:.3f}, {len(runs)} runs")
    print(f"recorded {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
