"""A/A and power of ``d5pipe compare`` across runs (issue 27).

A/A: the quickstart run ``--runs`` times back to back (``repetitions=R``), then
``d5pipe compare RUN_i RUN_i+1 --fail-on-regression 5`` for each consecutive pair: every reported
regression is a false positive. Power: ``power_sleep`` (a user operator sleeping a calibrated
time) run with a 4 ms sleep and again with a sleep ``--slowdown`` times longer, ``--runs - 1``
pairs: each pair must report the regression. Prints the false-positive and detection rates, the
timings compared and the wall time per run (the cost of the repetitions).

    .venv/bin/python benchmarks/bench_aa_compare.py --runs 5 --repetitions 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_CONF = ROOT / "benchmarks" / "configs"
REGRESSION_EXIT = 4


def _d5pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)


def _run(experiment: str, out: Path, overrides: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    r = _d5pipe("run", experiment, "--out", str(out), *overrides, env=env)
    if r.returncode not in (0, 3):
        raise SystemExit(f"d5pipe run {experiment} failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def _compare(a: Path, b: Path, pct: float, out_json: Path) -> tuple[bool, int, int, str]:
    r = _d5pipe("compare", str(a), str(b), "--fail-on-regression", str(pct), "--json", str(out_json))
    if r.returncode not in (0, REGRESSION_EXIT):
        raise SystemExit(f"d5pipe compare failed (exit {r.returncode}): {r.stderr[-2000:]}")
    data = json.loads(out_json.read_text())
    timings = [c for p in data["points"] for c in p["comparisons"] if c["kind"] == "timing"]
    tested = [c for c in timings if c["verdict"] != "not_compared"]
    return r.returncode == REGRESSION_EXIT, len(tested), len(timings), r.stdout.splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--pct", type=float, default=5.0, help="--fail-on-regression threshold")
    ap.add_argument("--slowdown", type=float, default=1.25)
    ap.add_argument("--delay-ms", type=float, default=4.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="d5pipe-aa-") as tmp:
        work = Path(tmp)
        walls = [_run("quickstart", work / f"aa{i}", [f"repetitions={args.repetitions}"]) for i in range(args.runs)]
        false = 0
        for i in range(args.runs - 1):
            hit, tested, total, line = _compare(work / f"aa{i}", work / f"aa{i + 1}", args.pct, work / f"aa{i}.json")
            false += hit
            print(f"A/A pair {i}-{i + 1}: {line}")
        pairs = args.runs - 1
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
        env["D5PIPE_ALLOW"] = "calibrated_sleep"
        detected = 0
        for i in range(pairs):
            base, slow = dict(env), dict(env)
            base["D5PIPE_BENCH_DELAY_S"] = str(args.delay_ms / 1000)
            slow["D5PIPE_BENCH_DELAY_S"] = str(args.delay_ms * args.slowdown / 1000)
            over = ["--config-dir", str(BENCH_CONF), f"repetitions={args.repetitions}"]
            _run("power_sleep", work / f"p{i}a", over, base)
            _run("power_sleep", work / f"p{i}b", over, slow)
            hit, _, _, line = _compare(work / f"p{i}a", work / f"p{i}b", args.pct, work / f"p{i}.json")
            detected += hit
            print(f"power pair {i} (x{args.slowdown:g} sleep): {line}")
    print(f"repetitions={args.repetitions}: quickstart {sum(walls) / len(walls):.0f} s per run "
          f"(min {min(walls):.0f}, max {max(walls):.0f})")
    print(f"A/A false-positive rate: {false}/{pairs} = {false / pairs:.2f} "
          f"(compare --fail-on-regression {args.pct:g}, consecutive quickstart runs)")
    print(f"power: {detected}/{pairs} pairs detected a x{args.slowdown:g} slowdown")
    return 0 if false == 0 and detected == pairs else 1


if __name__ == "__main__":
    raise SystemExit(main())
