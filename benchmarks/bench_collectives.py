"""Allreduce/broadcast/allgather bandwidth of the three level-3 engines on this machine.

Usage: ``python benchmarks/bench_collectives.py [--ranks 2] [--bytes 67108864] [--steps 10]``.
Each (backend, collective) is one real ``run_point`` launch (torchrun / mpirun); prints median time
with its 95% CI (per-iteration max over ranks) and algbw/busbw as nccl-tests define them.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext
from d5pipe.levels.level3.point import run_point


def _value(out: PointOutcome, name: str) -> tuple[float, float, float]:
    m = next(m for m in out.metrics if m.name == name)
    return float(m.value), float(m.ci_low or m.value), float(m.ci_high or m.value)  # type: ignore[arg-type]


def bench(backend: str, collective: str, ranks: int, message_bytes: int, steps: int, root: Path) -> PointOutcome:
    """One collective point, run for real."""
    dist = {"backend": backend, "ranks": ranks, "benchmark": "collective", "collective": collective,
            "message_bytes": message_bytes, "steps": steps, "warmup_steps": 2, "launcher": "auto",
            "oversubscribe": True, "timeout_s": 600.0, "extra_args": []}
    work = root / f"{backend}-{collective}"
    work.mkdir(parents=True)
    cfg = {"name": "bench", "seed": 0, "distributed": dist, "train": {"device": "cpu"}}
    ctx = PointContext("bench", "level3", work.name, {}, cfg, 0, root, work, root, {"name": "local"})
    return run_point(ctx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=64 * 2**20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=["ddp", "horovod", "mpi"])
    parser.add_argument("--collectives", nargs="+", default=["allreduce", "broadcast", "allgather"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'backend':8s} {'collective':10s} {'time ms (95% CI)':>28s} {'algbw GB/s':>11s} {'busbw GB/s':>11s}")
        for backend in args.backends:
            for coll in args.collectives:
                out = bench(backend, coll, args.ranks, args.bytes, args.steps, Path(tmp))
                t, lo, hi = _value(out, "collective_time_s")
                print(f"{backend:8s} {coll:10s} {1e3 * t:10.2f} [{1e3 * lo:7.2f}, {1e3 * hi:7.2f}] "
                      f"{_value(out, 'algbw_GBps')[0]:11.3f} {_value(out, 'busbw_GBps')[0]:11.3f}")


if __name__ == "__main__":
    main()
