"""How the history store scales: a synthetic history of RUNS runs x POINTS configurations x METRICS
timing metrics (three repetitions each) built with DuckDB's own SQL, then the time to fetch one
series (``d5pipe history series``'s query) and to check every series for steps
(``d5pipe history check``), per size, so the growth shows.

    python benchmarks/bench_history.py                       # 50x200, 100x1000, 200x2000 (x10 metrics)
    python benchmarks/bench_history.py --sizes 1000x10000    # the full size, if the disk and time allow
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from d5pipe.history import store
from d5pipe.history.check import check_history
from d5pipe.history.queries import run_values

REPS = 3


def build(path: Path, runs: int, points: int, metrics: int) -> float:
    """The store, filled with lognormal timings (2% between runs, a +10% step in one series of 50
    at a random run). Returns the seconds it took."""
    t0 = time.perf_counter()
    with store.connect(path, write=True) as con:
        con.execute(f"""INSERT INTO runs SELECT 'r' || lpad(r::VARCHAR, 6, '0'), 'bench',
            TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_hours(r), '/bench/' || r, 'node' || (r % 4), 'm0',
            'env' || (r // 100), '0.1.0', '', '{{}}', '{{}}', '{{}}', '', '', '', now() FROM range({runs}) t(r)""")
        con.execute(f"""INSERT INTO results SELECT 'r' || lpad(r::VARCHAR, 6, '0'), 'bench', 'level0',
            's' || p, '{{"size":' || p || '}}', 'p' || p || '-' || k, k, 'm' || m, 's', 'timing',
            exp(ln(1e-3 * (1 + p % 7)) + 0.02 * sqrt(-2 * ln(random())) * cos(2 * pi() * random())
                + CASE WHEN p % 50 = 0 AND r >= hash(p) % {runs} THEN ln(1.1) ELSE 0 END),
            NULL, NULL, 'ok', ''
            FROM range({runs}) a(r), range({points}) b(p), range({metrics}) c(m), range({REPS}) d(k)""")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["50x200", "100x1000", "200x2000"], help="RUNSxPOINTS")
    ap.add_argument("--metrics", type=int, default=10)
    ap.add_argument("--dir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="d5pipe-bench-history-", dir=args.dir))
    print(f"{'runs':>6} {'points':>7} {'metrics':>7} {'rows':>12} {'build s':>8} {'MB':>8} {'series s':>9} "
          f"{'check s':>8} {'series':>8} {'steps':>6}")
    try:
        for size in args.sizes:
            runs, points = (int(x) for x in size.lower().split("x"))
            path = base / f"h{runs}x{points}.duckdb"
            built = build(path, runs, points, args.metrics)
            with store.connect(path) as con:
                t0 = time.perf_counter()
                one = run_values(con, series=f"s{points // 2}", metric="m0")
                t_series = time.perf_counter() - t0
                assert len(one) == runs
                t0 = time.perf_counter()
                result = check_history(con)
                t_check = time.perf_counter() - t0
            rows = runs * points * args.metrics * REPS
            print(f"{runs:>6} {points:>7} {args.metrics:>7} {rows:>12,} {built:>8.1f} "
                  f"{path.stat().st_size / 2**20:>8.0f} {t_series:>9.3f} {t_check:>8.1f} {len(result.series):>8} "
                  f"{len(result.findings):>6}", flush=True)
            path.unlink()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
