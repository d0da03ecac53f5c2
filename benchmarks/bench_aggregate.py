"""Benchmark of the results pass (d5pipe.results.run_results) at 10k / 100k / 1M records.

A *record* here is one metric row of results.parquet, i.e. one (point, metric) pair. The synthetic
points are level0 matmul points from tests/report_fixtures.py with 11 metrics each (and 15 raw
timing samples per point, so the JSON parsed per point is realistic), so 1M rows = 90,910 point
files. Each size is aggregated in a fresh child process; its wall time and peak RSS (ru_maxrss from
``os.wait4`` of that child) are printed. Files are generated first (not timed) into a temp dir.

Usage: python benchmarks/bench_aggregate.py [--sizes 10000 100000 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from report_fixtures import write_bulk_records  # noqa: E402

METRICS_PER_POINT = 11
CHILD = (
    "import sys, time; from pathlib import Path; "
    "from d5pipe.results.run_results import build_results, write_results; "
    "t = time.perf_counter(); write_results(build_results(Path(sys.argv[1]))); "
    "print(f'{time.perf_counter() - t:.3f}')"
)


def run_child(run_dir: Path) -> tuple[float, float, float]:
    """Aggregate ``run_dir`` in a child; return (in-child seconds, wall seconds, peak RSS MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"aggregate failed with exit code {proc.returncode}")
    return float(out.strip()), wall, usage.ru_maxrss / 1024.0  # Linux: ru_maxrss in KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, default=None, help="generate under this directory and keep it")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="d5bench-", dir=args.keep))
    print(f"{'rows':>9} {'points':>8} {'aggregate_s':>11} {'child_wall_s':>12} {'peak_rss_MiB':>12} "
          f"{'parquet_MiB':>11}")
    try:
        for rows_target in args.sizes:
            run_dir = base / f"run{rows_target}"
            n_points = math.ceil(rows_target / METRICS_PER_POINT)
            rows = write_bulk_records(run_dir, n_points)
            agg_s, wall_s, rss = run_child(run_dir)
            size = (run_dir / "results.parquet").stat().st_size / 2**20
            print(f"{rows:>9} {n_points:>8} {agg_s:>11.2f} {wall_s:>12.2f} {rss:>12.0f} {size:>11.1f}",
                  flush=True)
            if args.keep is None:
                shutil.rmtree(run_dir)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
