"""How often comparisons of runs on this machine's real noise are wrong, and how often they find a
real slowdown (issue 35): ``d5pipe compare`` of two runs made back to back, and ``d5pipe ab`` of
the same two sides measured interleaved.

Cases, each ``--pairs`` times:

* **A/A, level 0**: the shipped quickstart's level 0 (3 matmul sizes, forward, backward and both);
  the same config on both sides. Every ``changed`` is a false alarm: the rate of pairs with any.
* **A/A, level 1**: one level-1 point of the quickstart (the MLP at batch 64), the same way.
* **slowdown x1.25 and x1.10, level 0**: a user operator doing 20 matrix products per call on
  side A and 25 (5/4 of the work) or 22 (11/10) on side B (benchmarks/scaled_work.py, the same
  source and point IDs): the rate of slowed timings found ``changed (slower)``, and of pairs where
  all three were.
* **threads, level 0** (``--cases threads-l0``): the quickstart's level 0 with one thread on side A
  and two on side B (``executor.resources.level0.cpus_per_task=2``, the same point IDs), two pairs
  sequential (``d5pipe compare``) and interleaved: what each timing was called.

Modes: ``sequential`` (two runs back to back, ``d5pipe compare``), ``interleaved`` (``d5pipe ab
--no-until-decided``: the shipped repetitions -- level 0's 10, level 1's 3 -- interleaved),
``until-decided`` (``d5pipe ab`` as
shipped: more repetitions until decided, a 300 s budget per pair here). For every case it prints
the verdict counts (a timing never reads "reproduced" when inconclusive: the verdicts
are changed, equivalent, inconclusive) and the wall time.

    .venv/bin/python benchmarks/bench_compare_power.py --pairs 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_CONF = ROOT / "benchmarks" / "configs"


def d5pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)


def _env(calls: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
    env["D5PIPE_ALLOW"] = "scaled_work"
    if calls is not None:
        env["D5PIPE_BENCH_CALLS"] = str(calls)
    return env


CASES = {  # (d5pipe run arguments, calls of side A, calls of side B, extra overrides of side B)
    "aa-l0": (["quickstart", "stages=[level0]"], None, None, []),
    "aa-l1": (["quickstart", "stages=[level1]", "sweep.grid.level1.batch_size=[64]"], None, None, []),
    "slow25-l0": (["power_work", "--config-dir", str(BENCH_CONF)], 20, 25, []),
    "slow10-l0": (["power_work", "--config-dir", str(BENCH_CONF)], 20, 22, []),
    "threads-l0": (["quickstart", "stages=[level0]"], None, None, ["executor.resources.level0.cpus_per_task=2"]),
}
DEFAULT_CASES = "aa-l0,aa-l1,slow25-l0,slow10-l0"
UNTIL_MARGIN = {"slow10-l0": 5.0}
"""To find a 10% change the comparison is asked to tell it from "the same within 5%": with the default
margin of 10%, a true 10% change lies on the margin, and "equivalent within x1.1" is a right answer."""
BUDGET_S = 300
"""The until-decided mode's budget per pair here (``d5pipe ab``'s default is 600 s)."""


def _check(r: subprocess.CompletedProcess[str], what: str, ok: tuple[int, ...]) -> None:
    if r.returncode not in ok:
        raise SystemExit(f"{what} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def _timings(report: Path) -> list[dict[str, object]]:
    data = json.loads(report.read_text())
    comp = data.get("comparison", data)
    return [{**t, "where": ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(p["params"].items()))}
            for p in comp["points"] for t in p["timings"] if not t["derived_from"]]


def sequential(work: Path, case: str, i: int, extra: list[str]) -> tuple[list[dict[str, object]], float]:
    run, ca, cb, over_b = CASES[case]
    t0 = time.perf_counter()
    for side, calls, over in (("a", ca, []), ("b", cb, over_b)):
        r = d5pipe("run", *run, *extra, *over, "--out", str(work / f"{case}-{i}-{side}"), env=_env(calls))
        _check(r, f"d5pipe run ({case}, side {side})", (0, 3))
    out = work / f"{case}-{i}.json"
    r = d5pipe("compare", str(work / f"{case}-{i}-a"), str(work / f"{case}-{i}-b"), "--json", str(out))
    _check(r, "d5pipe compare", (0,))
    return _timings(out), time.perf_counter() - t0


def interleaved(work: Path, case: str, i: int, extra: list[str], until: bool,
                margin: float | None = None, budget: float = BUDGET_S) -> tuple[list[dict[str, object]], float]:
    run, ca, cb, over_b = CASES[case]
    side, side_b = work / f"{case}-side", work / f"{case}-side-b"
    if not side.exists():
        _check(d5pipe("run", *run, *extra, "--dry-run", "--out", str(side), env=_env()), "d5pipe run --dry-run", (0,))
    if over_b and not side_b.exists():
        _check(d5pipe("run", *run, *extra, *over_b, "--dry-run", "--out", str(side_b), env=_env()),
               "d5pipe run --dry-run", (0,))
    t0 = time.perf_counter()
    out = work / f"{case}-{i}-ab{'-u' if until else ''}"
    args = ["ab", str(side), str(side_b if over_b else side), "--out", str(out), "--seed", str(i)]
    if ca is not None:
        args += ["--env-a", f"D5PIPE_BENCH_CALLS={ca}", "--env-b", f"D5PIPE_BENCH_CALLS={cb}"]
    args += ["--budget", f"{budget:g}"] if until else ["--no-until-decided"]
    if margin:
        args += ["--margin", str(margin)]
    r = d5pipe(*args, env=_env())
    _check(r, f"d5pipe ab ({case})", (0, 3))
    return _timings(out / "ab.json"), time.perf_counter() - t0


def summarize(case: str, mode: str, results: list[tuple[list[dict[str, object]], float]]) -> str:
    counts: Counter[str] = Counter()
    for timings, _ in results:
        counts.update(str(t["verdict"]) for t in timings)
    pairs = len(results)
    wall = sum(s for _, s in results)
    head = f"{case:<10} {mode:<22} {pairs:>2} pairs, {wall / pairs:6.1f} s per pair"
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if case.startswith("threads"):
        lines = [f"{head}:"]
        for k, (timings, _) in enumerate(results):
            said = ", ".join(f"{t['where']} {t['metric']} {t['verdict']}{' (' + str(t['direction']) + ')' if t['direction'] else ''}"
                             f" x{float(str(t['ratio'])):.2f}" for t in timings if t["ratio"] is not None)
            lines.append(f"    pair {k}: {said}")
        return "\n".join(lines)
    if case.startswith("aa"):
        false = sum(any(t["verdict"] == "changed" for t in timings) for timings, _ in results)
        return f"{head}: A/A pairs with a 'changed': {false}/{pairs} = {false / pairs:.0%} ({verdicts})"
    found = [sum(t["verdict"] == "changed" and t["direction"] == "slower" for t in timings) for timings, _ in results]
    total = sum(len(timings) for timings, _ in results)
    allp = sum(f == len(timings) for f, (timings, _) in zip(found, results))
    return (f"{head}: slowdown found in {sum(found)}/{total} timings = {sum(found) / max(1, total):.0%}, "
            f"all three in {allp}/{pairs} pairs ({verdicts})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--modes", default="sequential,interleaved,until-decided",
                    help="sequential (d5pipe compare), interleaved (d5pipe ab --no-until-decided), "
                         "until-decided (d5pipe ab)")
    ap.add_argument("--repetitions", type=int, default=None, help="override the shipped repetitions")
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs here")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="until-decided budget per pair, seconds")
    args = ap.parse_args()
    extra = [f"repetitions={args.repetitions}"] if args.repetitions else []
    lines = []
    with tempfile.TemporaryDirectory(prefix="d5pipe-power-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for case in args.cases.split(","):
            modes = args.modes.split(",")
            for mode in modes:
                results = []
                margin = UNTIL_MARGIN.get(case) if mode == "until-decided" else None
                for i in range(2 if case.startswith("threads") else args.pairs):
                    if mode == "sequential":
                        results.append(sequential(work, case, i, extra))
                    else:
                        results.append(interleaved(work, case, i, extra, until=mode == "until-decided", margin=margin,
                                                   budget=args.budget))
                label = mode + (f" --margin {margin:g}" if margin else "") + \
                    (f" --budget {args.budget:g}" if mode == "until-decided" and args.budget != BUDGET_S else "")
                lines.append(summarize(case, label, results))
                print(lines[-1], flush=True)
    print("\n".join(["== bench_compare_power", *lines]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
