"""Do forked processes spread less than fresh ones, measured in one time window? (issue 56, item 6)

``bench_repetition_start.py`` compares whole ``d5pipe run``s. Its fresh run lasts about 2.7 times as
long as its forked one, so it sees more of the machine's drift, and its CV counts that drift as spread
between repetitions. Here the kinds of process are shuffled together in every round, so they share the
window. Every process times the same operator the same way: matmul 64x64, float32, one torch thread,
on CPU 1, with d5pipe's timer (``d5pipe.measure.timer.measure``, 0.2 s budget). The kinds:

* ``fresh``: a new interpreter that imports torch, as d5pipe's default repetitions are;
* ``fixed``: the same with address-space randomisation off (``setarch -R``) and ``PYTHONHASHSEED=0``,
  so every such process has one layout and one hash seed, as forks share their server's;
* ``fork``: a child forked from one server that imported torch once and made the inputs, so every
  child times them at the server's addresses: the forks of d5pipe's fork server before its
  children varied their heaps (d5pipe.execute.fork_server.vary_heap); bench_fork_shards.py times
  d5pipe's own forks.

A process's value is the median of its samples. Printed per kind against ``fresh``: the spread between
processes (CV) three ways, with 95% CIs.
- The median over rounds of the per-round ratio, with its CI from order statistics.
- The CV pooled over all rounds, each value divided first by its round's median (so drift between
  rounds is left out), with a bootstrap CI over rounds.
- The root of the mean within-round variance, as a CV, with a bootstrap CI over rounds.

Usage: python benchmarks/bench_fork_spread.py [--rounds 25] [--per 8] [--seed 21] [--json out.json]
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("fresh", "fixed", "fork")
BODY = r"""
import json, os, sys
import numpy as np
os.sched_setaffinity(0, {min(1, os.cpu_count() - 1)})
import torch
from d5pipe.measure.timer import measure
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
def value():
    return float(np.median(measure(lambda: torch.mm(a, b), {"budget_s": 0.2}).samples))
"""
CHILD = BODY + "print(json.dumps(value()))\n"
SERVER = BODY + r"""
for line in sys.stdin:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(value()).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as got:
        data = got.read()
    os.waitpid(pid, 0)
    sys.stdout.write(data.decode() + "\n")
    sys.stdout.flush()
"""

Rounds = list[dict[str, list[float]]]


def normalised(rounds: Rounds, kind: str) -> list[float]:
    """Every round's values of ``kind``, each divided by its round's median (of every kind), so
    drift between rounds is left out."""
    xs = []
    for row in rounds:
        mid = statistics.median([v for values in row.values() for v in values])
        xs += [v / mid for v in row[kind]]
    return xs


def pooled_cv(rounds: Rounds, kind: str) -> float:
    """CV over every round's values of ``kind`` (:func:`normalised`)."""
    xs = normalised(rounds, kind)
    return statistics.stdev(xs) / statistics.mean(xs)


def within_cv(rounds: Rounds, kind: str) -> float:
    """The root of the mean over rounds of the within-round relative variance of ``kind``."""
    return statistics.mean(statistics.variance(r[kind]) / statistics.mean(r[kind]) ** 2 for r in rounds) ** 0.5


def round_cv(row: dict[str, list[float]], kind: str) -> float:
    return statistics.stdev(row[kind]) / statistics.mean(row[kind])


def verdict(low: float, high: float) -> str:
    """A spread ratio's CI read against 1: ``lower`` when it lies wholly below, ``not lower`` when its
    lower end is at least 0.9 (the house's 10% margin), else ``inconclusive``."""
    return "lower" if high < 1 else "not lower" if low >= 0.9 else "inconclusive"


def shuffled_rounds(n: int, per: int, kinds: tuple[str, ...], rng: random.Random,
                    one: Callable[[str], float]) -> Rounds:
    """``n`` rounds of ``per`` values of each kind from ``one(kind)``, the kinds shuffled together
    in each round (so they share its time window); each round's CVs on stderr."""
    rounds: Rounds = []
    for r in range(n):
        order = [k for k in kinds for _ in range(per)]
        rng.shuffle(order)
        row: dict[str, list[float]] = {k: [] for k in kinds}
        for kind in order:
            row[kind].append(one(kind))
        rounds.append(row)
        print(f"round {r + 1}/{n}: " + ", ".join(
            f"{k} CV {100 * round_cv(row, k):.2f}% (median {1e6 * statistics.median(row[k]):.2f} us)"
            for k in kinds), file=sys.stderr, flush=True)
    return rounds


def print_spreads(rounds: Rounds, kinds: tuple[str, ...]) -> None:
    """Per kind: the CV between its values pooled (:func:`pooled_cv`), within rounds and the median of rounds'."""
    for kind in kinds:
        print(f"  {kind:<5}: pooled {100 * pooled_cv(rounds, kind):.2f}%, within rounds {100 * within_cv(rounds, kind):.2f}%, "
              f"median of rounds {100 * statistics.median(round_cv(r, kind) for r in rounds):.2f}%")


def bootstrap(rounds: Rounds, f: Callable[[Rounds, str], float], kind: str, seed: int) -> tuple[float, float]:
    """95% percentile interval of f(kind) / f(fresh) over rounds drawn with replacement."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(2000):
        draw = [rounds[rng.randrange(len(rounds))] for _ in rounds]
        ratios.append(f(draw, kind) / f(draw, "fresh"))
    ratios.sort()
    return ratios[50], ratios[1949]


def main() -> int:
    from d5pipe.measure.stats import median_ci

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--per", type=int, default=8, help="processes of each kind per round")
    ap.add_argument("--seed", type=int, default=21, help="of the order of the processes")
    ap.add_argument("--json", help="write every process's value here")
    a = ap.parse_args()
    if shutil.which("setarch") is None:
        print("setarch (util-linux) is needed for the fixed-layout processes", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    fixed_env = {**env, "PYTHONHASHSEED": "0"}
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    stdin, stdout = server.stdin, server.stdout
    assert stdin is not None and stdout is not None

    def one(kind: str) -> float:
        if kind == "fork":
            stdin.write("go\n")
            stdin.flush()
            return float(json.loads(stdout.readline()))
        argv = [sys.executable, "-c", CHILD]
        if kind == "fixed":
            argv = ["setarch", os.uname().machine, "-R", *argv]
        out = subprocess.run(argv, capture_output=True, text=True, env=fixed_env if kind == "fixed" else env,
                             check=True)
        return float(json.loads(out.stdout))

    try:
        rounds = shuffled_rounds(a.rounds, a.per, KINDS, random.Random(a.seed), one)
    finally:
        stdin.close()
        server.wait()
    print(f"matmul 64x64, {a.rounds} rounds of {a.per} processes a kind, shuffled together; CV between processes:")
    print_spreads(rounds, KINDS)
    for kind in ("fixed", "fork"):
        per_round = [round_cv(r, kind) / round_cv(r, "fresh") for r in rounds]
        ci = median_ci(per_round)
        lines = [f"median of per-round ratios {statistics.median(per_round):.2f} [{ci.low:.2f}, {ci.high:.2f}] "
                 f"({100 * ci.coverage:.0f}% CI)"]
        for name, f in (("pooled", pooled_cv), ("within rounds", within_cv)):
            low, high = bootstrap(rounds, f, kind, a.seed)
            lines.append(f"{name} {f(rounds, kind) / f(rounds, 'fresh'):.2f} [{low:.2f}, {high:.2f}]")
        print(f"  {kind}/fresh: " + "; ".join(lines))
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rounds": rounds}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
