"""Plan time of d5pipe for 1k / 10k / 100k points, next to Snakemake alone on a DAG of one job per point.

Prints, per size: `d5pipe plan` wall time (compose + expand + IDs + shards, a fresh process) and
that process's peak memory (its maximum resident set), the dry-run time of d5pipe's sharded
Snakemake DAG, and the dry-run time of a plain Snakefile with one job per point. Ratios are
measured side by side in this one run. The sizes are grid points; each is planned in 3
repetitions (set here: level 0's own default is 10, which would plan 1,000,000 points at the
largest size instead of the 300,000 that issues 17 and 36 measured).
Usage: python benchmarks/bench_plan.py [--sizes 1000,10000,100000] [--timeout 900]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXPERIMENT = """# @package _global_
name: plan_scale
stages: [level0]
repetitions: 3
shards:
  points_per_shard: 250
sweep:
  grid:
    operators.size: {sizes}
    operators.batch: {batches}
"""

PLAIN_SNAKEFILE = """
N = int(config["npoints"])
rule all:
    input: expand("out/{i}.txt", i=range(N))
rule point:
    output: "out/{i}.txt"
    shell: "touch {output}"
"""


PLAN_WITH_PEAK = ("import resource, sys\nfrom d5pipe.cli.main import main\nrc = main(sys.argv[1:])\n"
                  "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
                  "raise SystemExit(rc)\n")


def _plan(args: list[str], timeout: float) -> tuple[float, float]:
    """(seconds, peak MB) of one ``d5pipe plan`` in a fresh process."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PLAN_WITH_PEAK, "plan", *args], capture_output=True, text=True,
                       timeout=timeout)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"d5pipe plan failed:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    kb = next(int(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("PEAK_KB"))
    return dt, kb / 1024


def _timed(cmd: list[str], timeout: float) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--plan-only", action="store_true", help="only d5pipe plan (no Snakemake dry runs)")
    args = ap.parse_args()
    print(f"{'points':>8} {'d5pipe plan s':>14} {'peak MB':>8} {'d5pipe DAG -n s':>16} {'jobs':>6} "
          f"{'snakemake 1job/pt -n s':>23} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        (tmpd / "Snakefile").write_text(PLAIN_SNAKEFILE)
        for n in [int(s) for s in args.sizes.split(",")]:
            conf = tmpd / f"conf{n}"
            (conf / "experiment").mkdir(parents=True)
            batches = max(1, n // 1000)
            sizes = n // batches
            (conf / "experiment" / "plan_scale.yaml").write_text(
                EXPERIMENT.format(sizes=list(range(1, sizes + 1)), batches=list(range(1, batches + 1)))
            )
            t_plan, peak = _plan(["plan_scale", "--config-dir", str(conf), "--json"], args.timeout)
            if args.plan_only:
                print(f"{n:>8} {t_plan:>14.2f} {peak:>8.0f}", flush=True)
                continue
            run = tmpd / f"run{n}"
            from d5pipe.execute.run import load_plan, prepare_run

            plan = load_plan("plan_scale", [], [str(conf)])
            prepare_run(plan, run, [])
            jobs = plan.stages["level0"].n_shards + 2
            t_dag = _timed(
                [sys.executable, "-m", "snakemake", "-n", "--quiet", "all", "--snakefile",
                 str(ROOT / "Snakefile"), "--directory", str(run), "--cores", "1"],
                args.timeout,
            )
            t_plain = _timed(
                [sys.executable, "-m", "snakemake", "-n", "--quiet", "all", "--snakefile",
                 str(tmpd / "Snakefile"), "--directory", str(tmpd / f"plain{n}"), "--cores", "1",
                 "--config", f"npoints={n}"],
                args.timeout,
            )
            print(f"{n:>8} {t_plan:>14.2f} {peak:>8.0f} {t_dag:>16.2f} {jobs:>6} {t_plain:>23.2f} "
                  f"{t_plain / t_dag:>6.1f}x", flush=True)


if __name__ == "__main__":
    main()
