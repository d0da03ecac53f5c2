"""Which value of a process a comparison should use on this machine's real noise: the median of its
samples or its fastest sample (issue 35; d5pipe.results.repetition_values.fastest_sample).

It runs the level-0 user operator of benchmarks/bench_compare_power.py (``power_work``: 20 matrix
products per call on side A, 25 on side B, a true 25% slowdown at the same point IDs) ``--runs``
times per side, alternating A and B, each run with ``--repetitions`` processes per point. Then,
from those processes, for each statistic:

* the spread between processes (sd of the log values within a run) and between runs (sd of the
  runs' mean log values), per size;
* resampled comparisons through the project's one comparison model
  (d5pipe.results.timing_compare.compare_family, shipped defaults: Holm over the three sizes,
  moderated variances, 10% margin): ``k`` processes drawn per side from an A run and a B run (the
  rate of slowed timings found ``changed``, slower) and from two runs of one side (the rate of A/A
  pairs with any ``changed``), for k in ``--draws``, with each ``--run-noise`` (the variance a
  separate run adds, ``d5pipe compare --run-noise``).

    .venv/bin/python benchmarks/bench_process_statistic.py --runs 4 --repetitions 10
    .venv/bin/python benchmarks/bench_process_statistic.py --reuse DIR   # runs kept with --keep DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_compare_power import BENCH_CONF, ROOT, _env

from d5pipe.results.repetition_values import Side, fastest_sample
from d5pipe.results.timing_compare import Item, Policy, compare_family

STATISTICS = ("median", "fastest")


def run(out: Path, calls: int, repetitions: int, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "d5pipe.cli.main", "run", "power_work", "--config-dir", str(BENCH_CONF),
           f"repetitions={repetitions}", *extra, "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(calls), cwd=ROOT, check=False)
    if r.returncode not in (0, 3):
        raise SystemExit(f"d5pipe run failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def load(run_dir: Path) -> dict[str, dict[int, list[float]]]:
    """size -> statistic index -> one value per process (median, fastest)."""
    out: dict[str, dict[int, list[float]]] = {}
    for f in sorted((run_dir / "points" / "level0").glob("*.json")):
        rec = json.loads(f.read_text())
        if rec["status"] != "ok":
            continue
        samples = rec["samples"]["time"]
        value = next(m["value"] for m in rec["metrics"] if m["name"] == "time")
        best = fastest_sample(value, samples)
        assert best is not None, f"{f}: time is not the median of its samples"
        per = out.setdefault(str(rec["params"]["operators.size"]), {0: [], 1: []})
        per[0].append(value)
        per[1].append(best)
    return out


def sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def spreads(runs: list[dict[str, dict[int, list[float]]]], stat: int) -> dict[str, tuple[float, float, float]]:
    """size -> (between processes, between runs' means, of a run as a whole), in log units: the last
    is what the runs' means vary by beyond their processes' own spread (variance components)."""
    out = {}
    for size in runs[0]:
        logs = [[math.log(v) for v in r[size][stat]] for r in runs]
        process = statistics.mean(statistics.variance(x) for x in logs)
        means = statistics.variance([statistics.mean(x) for x in logs])
        n = statistics.mean(len(x) for x in logs)
        out[size] = (math.sqrt(process), math.sqrt(means), math.sqrt(max(0.0, means - process / n)))
    return out


def verdicts(a: dict[str, dict[int, list[float]]], b: dict[str, dict[int, list[float]]], stat: int, k: int,
             rng: random.Random, run_noise: float) -> list[tuple[str, str | None]]:
    items = [Item(f"time[{size}]", "s", Side.of(rng.sample(a[size][stat], k)), Side.of(rng.sample(b[size][stat], k)))
             for size in sorted(a, key=int)]
    return [(t.verdict, t.direction) for t in compare_family(items, Policy(run_noise=run_noise))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs per side")
    ap.add_argument("--repetitions", type=int, default=10, help="processes per point in each run")
    ap.add_argument("--draws", default="3,5,10", help="processes per side drawn for a comparison")
    ap.add_argument("--trials", type=int, default=20, help="draws per pair of runs")
    ap.add_argument("--run-noise", default="0,2", help="comparison model's run-level sd to try, percent (compare's --run-noise)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs here")
    ap.add_argument("--reuse", type=Path, default=None, help="analyse the runs kept in this folder")
    ap.add_argument("overrides", nargs="*", help="more overrides for both sides (e.g. timer.target_ci_pct=0.2)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="d5pipe-stat-") as tmp:
        work = args.reuse or args.keep or Path(tmp)
        if args.reuse is None:
            work.mkdir(parents=True, exist_ok=True)
            for i in range(args.runs):
                for side, calls in (("a", 20), ("b", 25)):
                    run(work / f"{side}{i}", calls, args.repetitions, args.overrides)
        side_a = [load(p) for p in sorted(work.glob("a*")) if p.is_dir()]
        side_b = [load(p) for p in sorted(work.glob("b*")) if p.is_dir()]
    rng = random.Random(0)
    reps = min(len(v[0]) for r in side_a + side_b for v in r.values())
    print(f"== bench_process_statistic: {len(side_a)} runs of A (20 products), {len(side_b)} of B (25), "
          f"{reps} processes per point each")
    for i, name in enumerate(STATISTICS):
        for label, of_side in (("A", side_a), ("B", side_b)):
            print(f"{name:>8}: spread (sd of log) between processes / of the runs' means / of a run as a whole, "
                  f"{label}: " + ", ".join(f"size {s} {p:.3f}/{m:.3f}/{r:.3f}"
                                           for s, (p, m, r) in sorted(spreads(of_side, i).items(), key=lambda x: int(x[0]))))
    for noise in (float(x) / 100 for x in args.run_noise.split(",")):
        for k in (int(x) for x in args.draws.split(",")):
            if k > reps:
                continue
            for i, name in enumerate(STATISTICS):
                found = total = 0
                for ra, rb in itertools.product(side_a, side_b):
                    for _ in range(args.trials):
                        got = verdicts(ra, rb, i, k, rng, noise)
                        found += sum(v == "changed" and d == "slower" for v, d in got)
                        total += len(got)
                false = pairs = 0
                for ra, rb in [*itertools.combinations(side_a, 2), *itertools.combinations(side_b, 2)]:
                    for _ in range(args.trials):
                        false += any(v == "changed" for v, _ in verdicts(ra, rb, i, k, rng, noise))
                        pairs += 1
                print(f"run noise {noise:.0%}, {name:>8}, {k:>2} processes a side: 25% slowdown found in "
                      f"{found}/{total} = {found / max(1, total):.0%} of timings; A/A pairs with a 'changed': "
                      f"{false}/{pairs} = {false / max(1, pairs):.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
