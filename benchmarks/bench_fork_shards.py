"""Forked against fresh repetitions through d5pipe's own shard jobs, in one time window (issue 56, item 6).

``bench_fork_spread.py`` compares a toy fork server with fresh interpreters; this one uses d5pipe's:
one planned run of the one-point level-0 experiment (benchmarks/configs/experiment/one_point.yaml:
matmul 64x64, 0.2 s timer budget), with ``rounds x 3 x per`` repetitions, each its own shard job.
The run's fork server (d5pipe.execute.fork_server.serving) serves it, and every shard job is
started as d5pipe starts it: as a fork (``python -m d5pipe.execute.fork_client``, the ``shell:``
of a run with ``executor.fork_server``; each child varies its heap, fork_server.vary_heap) or as a
fresh process (``python -m d5pipe.execute.jobs``, the default). In each round ``per`` jobs of each
kind run one after the other in a shuffled order, so the kinds share the machine's state in that
window. Each record's
``provenance.process_start.how`` must name the kind it was started as.

A third kind, ``fixed``, is a fresh process with what ``exec`` randomises and a fork cannot (the
address-space layout, so where the libraries' code and the heap lie, and Python's hash seed) fixed
as a fork's is: ``setarch -R`` and ``PYTHONHASHSEED=0``. Where forks spread less than fresh
processes, it tells whether those are what the forks leave out.

A repetition's value is its record's ``time`` metric (the median of its samples). Printed per kind:
the spread between repetitions (CV) three ways, and fork against fresh with 95% CIs: the median of
per-round ratios of the CV and of MAD/median, with order-statistics CIs; bench_fork_spread.py's CV
pooled over rounds (each value divided by its round's median) and root of the mean within-round
variance, and MAD/median pooled the same way, with bootstrap CIs over rounds. The machine's slow
spells (a repetition measured at twice its siblings' time) dominate the CVs; MAD/median is moved
by the many repetitions, such as those a heap layout makes a little slower or faster. Verdict per estimator, as
bench_repetition_start.py judges: ``lower`` when the whole CI is below 1, ``not lower`` when its
lower end is at least 0.9 (the house's 10% margin), else ``inconclusive``.

Usage: python benchmarks/bench_fork_shards.py [--rounds 25] [--per 8] [--seed 21] [--json out.json] [--keep] [--no-fixed]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_fork_spread import (
    Rounds,
    bootstrap,
    normalised,
    pooled_cv,
    print_spreads,
    round_cv,
    shuffled_rounds,
    verdict,
    within_cv,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "benchmarks" / "configs"
KINDS = ("fresh", "fixed", "fork")


def round_mad(row: dict[str, list[float]], kind: str) -> float:
    """MAD/median of one round's values of ``kind``: a repetition caught in one of the machine's
    slow spells (about 2x, for seconds) moves the CV, not this."""
    mid = statistics.median(row[kind])
    return statistics.median(abs(v - mid) for v in row[kind]) / mid


def pooled_mad(rounds: Rounds, kind: str) -> float:
    """MAD/median over every round's values of ``kind`` (:func:`bench_fork_spread.normalised`)."""
    xs = normalised(rounds, kind)
    centre = statistics.median(xs)
    return statistics.median(abs(x - centre) for x in xs) / centre


def plan(run: Path, repetitions: int) -> list[str]:
    """Plan the experiment into ``run`` (``d5pipe run --dry-run``); its level-0 shard names."""
    cmd = [sys.executable, "-m", "d5pipe.cli.main", "run", "one_point", "--config-dir", str(CONFIGS),
           "--out", str(run), "--no-history", "--dry-run", f"repetitions={repetitions}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"d5pipe run --dry-run failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return sorted(p.stem for p in (run / "plan" / "level0").glob("s*.json"))


def shard_job(run: Path, shard: str, kind: str) -> float:
    """Run one shard job as d5pipe's rule would, started as ``kind``; its repetition's value."""
    from d5pipe.execute.fork_server import SOCKET

    body = ["d5pipe.execute.fork_client", SOCKET] if kind == "fork" else ["d5pipe.execute.jobs"]
    cmd = [sys.executable, "-m", *body, "level0", shard, f"shards/level0/{shard}.json", f"logs/level0/{shard}.log"]
    env = dict(os.environ)
    if kind == "fixed":  # what exec would randomise, fixed as a fork's are: layout and hash seed
        cmd = ["setarch", os.uname().machine, "-R", *cmd]
        env["PYTHONHASHSEED"] = "0"
    proc = subprocess.run(cmd, cwd=run, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} shard job {shard} failed (exit {proc.returncode}); its log: "
                         f"{run / 'logs' / 'level0' / (shard + '.log')}")
    (point,) = json.loads((run / "plan" / "level0" / f"{shard}.json").read_text())["points"]
    rec = json.loads((run / "points" / "level0" / f"{point['point_id']}.json").read_text())
    how = rec["provenance"].get("process_start", {}).get("how")
    if how != ("fresh" if kind == "fixed" else kind) or rec["status"] != "ok":
        raise SystemExit(f"shard {shard}: started as {kind}, its record says {how!r}, status {rec['status']!r}")
    return float(next(m["value"] for m in rec["metrics"] if m["name"] == "time"))


def main() -> int:
    from d5pipe.execute.fork_server import serving
    from d5pipe.measure.stats import median_ci

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--per", type=int, default=8, help="repetitions of each kind per round")
    ap.add_argument("--seed", type=int, default=21, help="of the order of the jobs")
    ap.add_argument("--json", help="write every repetition's value here")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--no-fixed", action="store_true", help="forks and fresh processes only (more of each in the time)")
    a = ap.parse_args()
    kinds = tuple(k for k in KINDS if not (a.no_fixed and k == "fixed"))
    tmp = Path(tempfile.mkdtemp(prefix="d5pipe-bench-forkshards-"))
    run = tmp / "run"
    try:
        shards = iter(plan(run, a.rounds * a.per * len(kinds) + len(kinds)))
        with serving(run, ["level0"]):
            for kind in kinds:  # page cache, the server's imports: not counted
                shard_job(run, next(shards), kind)
            rounds = shuffled_rounds(a.rounds, a.per, kinds, random.Random(a.seed),
                                     lambda kind: shard_job(run, next(shards), kind))
    finally:
        if a.keep:
            print(f"run directory kept: {run}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"one_point (matmul 64x64) through d5pipe's shard jobs, {a.rounds} rounds of {a.per} repetitions "
          "a kind, shuffled together; CV between repetitions:")
    print_spreads(rounds, kinds)
    for kind in kinds[1:]:
        for name, f in (("CV", round_cv), ("MAD/median", round_mad)):
            per_round = [f(r, kind) / f(r, "fresh") for r in rounds if f(r, "fresh") > 0]
            ci = median_ci(per_round)
            print(f"  {kind}/fresh, {name}, median of per-round ratios: {statistics.median(per_round):.2f} "
                  f"[{ci.low:.2f}, {ci.high:.2f}] ({100 * ci.coverage:.0f}% CI) -> {verdict(ci.low, ci.high)}")
        for name, g in (("CV pooled", pooled_cv), ("CV within rounds", within_cv), ("MAD/median pooled", pooled_mad)):
            low, high = bootstrap(rounds, g, kind, a.seed)
            print(f"  {kind}/fresh, {name}: {g(rounds, kind) / g(rounds, 'fresh'):.2f} [{low:.2f}, {high:.2f}] "
                  f"(95% bootstrap CI over rounds) -> {verdict(low, high)}")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rounds": rounds}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
