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
    p.add_argument("--dry-run", action="store_true",
                   help="write the plan into the run directory and list Snakemake's jobs; run nothing")


def main(args: argparse.Namespace) -> int:
    run_dir = run(
        args.experiment,
        args.overrides,
        out=args.out,
        jobs=args.jobs,
        executor=args.executor,
        config_dirs=args.config_dir,
        retry_failed=args.retry_failed,
        timeout=args.timeout,
        dry_run=args.dry_run,
    )
    if args.dry_run:
        print(f"planned (dry run): {run_dir.resolve()}")
        return 0
    print(f"report: {RunDir(run_dir).report_html.resolve()}")
    return 0
