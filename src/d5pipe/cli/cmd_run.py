"""``d5pipe run EXPERIMENT [overrides...]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.cli.arguments import positive_float, positive_int
from d5pipe.execute.run import run
from d5pipe.rundir.layout import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", help="name of conf/experiment/NAME.yaml (or in --config-dir)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. train.epochs=3")
    p.add_argument("--out", type=Path, help="run directory (default runs/EXPERIMENT)")
    p.add_argument("--jobs", type=positive_int, help="parallel jobs (default from the executor config)")
    p.add_argument("--executor", choices=["local", "slurm"], help="where jobs run (default local)")
    p.add_argument("--config-dir", action="append", default=[], help="extra config directory")
    p.add_argument("--retry-failed", action="store_true", help="re-run points recorded as failed")
    p.add_argument("--timeout", type=positive_float, help="hard limit in seconds; on expiry Snakemake is "
                   "killed and the run's SLURM jobs are cancelled")
    p.add_argument("--force", action="store_true",
                   help="take over an --out that belongs to another experiment or is not a run directory")
    p.add_argument("-v", "--verbose", action="store_true", help="show Snakemake's full output")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write points and checks as JUnit XML")
    p.add_argument("--dry-run", action="store_true",
                   help="write the plan into the run directory and list Snakemake's jobs; run nothing")


def main(args: argparse.Namespace) -> int:
    outcome = run(
        args.experiment,
        args.overrides,
        out=args.out,
        jobs=args.jobs,
        executor=args.executor,
        config_dirs=args.config_dir,
        retry_failed=args.retry_failed,
        timeout=args.timeout,
        dry_run=args.dry_run,
        force=args.force,
        verbose=args.verbose,
    )
    rd = RunDir(outcome.run_dir)
    if outcome.verdict is None:
        print(f"planned (dry run): {rd.root.resolve()}")
        return 0
    if args.junit is not None:
        from d5pipe.results.finalize import results_frame
        from d5pipe.results.junit import write_junit

        write_junit(results_frame(rd.root), args.junit)
    print(f"report: {rd.report_html.resolve()}")
    print(f"d5pipe: {outcome.verdict.line(str(rd.report_html))}")
    return outcome.verdict.exit_code
