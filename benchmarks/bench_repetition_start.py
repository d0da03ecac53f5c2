"""Repetitions started by the fork server vs as fresh processes, side by side in one run.

The same one-point level-0 experiment (benchmarks/configs/experiment/one_point.yaml: matmul 64x64,
the default 10 repetitions, each its own shard job and so its own process) is run with ``d5pipe
run`` both ways, interleaved (the order alternates every round), into fresh run directories:

* ``fork``: ``executor.fork_server=true``: each shard job a fork of the run's
  server, which has imported torch and the level's code once (d5pipe.execute.fork_server);
* ``fresh``: ``executor.fork_server=false`` (the default): each shard job a new interpreter importing torch.

Per round and way: the run's wall time (the whole ``d5pipe run`` command) and the spread between
its repetitions: coefficient of variation and MAD/median of the 10 repetitions' medians (the
``time`` metric of each record), the coefficient of variation of their fastest samples (``min``,
what comparisons use), the successive-difference CV of the medians in the order they ran (little
moved by the machine's slow drift, which a fresh run, twice as long, sees more of), and each repetition's ``provenance.process_start.start_s``.
Printed: the figures of every round, their medians, the median of the per-round paired wall-time
ratios fresh/fork, and the spread ratio fork/fresh (a fork must not hide process-to-process
variation): for each spread estimator (CV, successive-difference CV, MAD/median), the median over
the rounds of the per-round ratio fork/fresh, with its 95% CI from order statistics
(d5pipe.measure.stats.median_ci) and a verdict: ``lower`` when the whole CI is below 1, ``not
lower`` when its lower end is at least 0.9 (the house's 10% margin), else ``inconclusive``. A single
repetition far from its siblings dominates a run's CV, so the per-round ratios, not pooled
variances, are judged; forks spread no less than fresh processes only when no estimator says so.

Usage: python benchmarks/bench_repetition_start.py [--rounds 5] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "benchmarks" / "configs"
WAYS = ("fork", "fresh")


def successive_cv(values: list[float]) -> float:
    """Spread from successive differences (von Neumann): sqrt(mean((x[i+1]-x[i])^2) / 2) / mean,
    in the order the repetitions ran; a slow drift of the machine over the run (a longer run sees
    more of it) adds little to it, unlike to the plain CV."""
    diffs = [(b - a) ** 2 for a, b in zip(values, values[1:])]
    return (statistics.mean(diffs) / 2) ** 0.5 / statistics.mean(values)


def run_once(way: str, out: Path) -> dict[str, Any]:
    """One ``d5pipe run`` of the experiment ``way``; its wall time and repetitions' figures."""
    cmd = [sys.executable, "-m", "d5pipe.cli.main", "run", "one_point", "--config-dir", str(CONFIGS),
           "--out", str(out), "--no-history", f"executor.fork_server={'true' if way == 'fork' else 'false'}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{way}: d5pipe run failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    medians, fastest, starts, hows = [], [], [], set()
    recs = [json.loads(p.read_text()) for p in (out / "points" / "level0").glob("*.json")]
    for rec in sorted(recs, key=lambda r: str(r["provenance"]["started"])):  # in the order they ran
        metrics = {m["name"]: m["value"] for m in rec["metrics"]}
        medians.append(metrics["time"])
        fastest.append(metrics["min"])
        start = rec["provenance"].get("process_start", {})
        hows.add(start.get("how"))
        if start.get("start_s") is not None:
            starts.append(float(start["start_s"]))
    if hows != {way}:
        raise SystemExit(f"{way}: the records say their processes started as {sorted(map(str, hows))}")
    mid = statistics.median(medians)
    return {"wall_s": wall, "n": len(medians),
            "cv": statistics.stdev(medians) / statistics.mean(medians),
            "mad": statistics.median(abs(m - mid) for m in medians) / mid,
            "cv_min": statistics.stdev(fastest) / statistics.mean(fastest),
            "succ": successive_cv(medians),
            "start_s": statistics.median(starts) if starts else float("nan")}


SPREADS = (("cv", "CV"), ("succ", "successive-difference CV"), ("mad", "MAD/median"))
"""The spread estimators judged: a repetition far from its siblings moves the first two, not the third."""


def spread_verdicts(rows: dict[str, list[dict[str, Any]]], way: str, base: str = "fresh") -> list[str]:
    """Per estimator: the median over rounds of the per-round ratio way/base, its 95% CI (order
    statistics, d5pipe.measure.stats.median_ci) and a verdict: ``lower`` when the whole CI is below 1,
    ``not lower`` when its lower end is at least 0.9 (the house's 10% margin), else ``inconclusive``."""
    from bench_fork_spread import verdict

    from d5pipe.measure.stats import median_ci

    lines = []
    for key, what in SPREADS:
        ratios = [a[key] / b[key] for a, b in zip(rows[way], rows[base], strict=True) if b[key] > 0]
        ci = median_ci(ratios)
        lines.append(f"  {what} {way}/{base}: x{statistics.median(ratios):.2f} [{ci.low:.2f}, {ci.high:.2f}] "
                     f"(median of {len(ratios)} per-round ratios, {100 * ci.coverage:.0f}% CI) -> {verdict(ci.low, ci.high)}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="d5pipe-bench-repstart-"))
    rows: dict[str, list[dict[str, Any]]] = {w: [] for w in WAYS}
    try:
        run_once("fork", tmp / "warmup")  # page cache and the machine's ceilings, not measured
        for r in range(args.rounds):
            for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
                row = run_once(way, tmp / f"{way}-{r}")
                rows[way].append(row)
                print(f"round {r + 1} {way:5s}: wall {row['wall_s']:6.2f} s, {row['n']} repetitions, "
                      f"start {row['start_s']:.3f} s each (median), between-repetition CV "
                      f"{100 * row['cv']:5.1f}%, MAD/median {100 * row['mad']:5.1f}%, CV of the fastest samples "
                      f"{100 * row['cv_min']:5.1f}%, successive-difference CV {100 * row['succ']:5.1f}%", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"run directories kept in {tmp}")

    def med(way: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[way])

    speedup = statistics.median(b["wall_s"] / a["wall_s"] for a, b in zip(rows["fork"], rows["fresh"], strict=True))
    print(f"\none-point level-0 run, 10 repetitions, {args.rounds} rounds (medians):")
    for way in WAYS:
        print(f"  {way:5s}: wall {med(way, 'wall_s'):6.2f} s (min {min(r['wall_s'] for r in rows[way]):.2f}), "
              f"start {med(way, 'start_s'):.3f} s per repetition, between-repetition CV "
              f"{100 * med(way, 'cv'):.1f}%, MAD/median {100 * med(way, 'mad'):.1f}%, CV of the fastest samples "
              f"{100 * med(way, 'cv_min'):.1f}%, successive-difference CV {100 * med(way, 'succ'):.1f}%")
    print(f"  wall time fresh/fork: x{speedup:.2f} (median of per-round ratios)")
    print("  spread between repetitions, fork against fresh (below 1: forked repetitions spread less):")
    for way in WAYS:
        if way != "fresh":
            print("\n".join(spread_verdicts(rows, way)))
    goal = med("fork", "wall_s") <= 6.0
    print(f"  goal (fork run <= 6 s): {'met' if goal else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
