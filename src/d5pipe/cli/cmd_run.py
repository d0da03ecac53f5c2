"""``d5pipe run EXPERIMENT [overrides...]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.runner import run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", help="name of conf/experiment/NAME.yaml (or in --config-dir)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. train.epochs=3")
    p.add_argument("--out", type=Path, help="run directory (default runs/EXPERIMENT)")
    p.add_argument("--jobs", type=int, help="parallel jobs (default from the executor config)")
    p.add_argument("--executor", choices=["local", "slurm"], help="where jobs run (default local)")
    p.add_argument("--config-dir", action="append", default=[], help="extra config directory")
    p.add_argument("--retry-failed", action="store_true", help="re-run points recorded as failed")
    p.add_argument("--timeout", type=float, help="hard limit in seconds; on expiry Snakemake is killed "
                   "and the run's SLURM jobs are cancelled")


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
    )
    print(f"report: {(run_dir / 'report.html').resolve()}")
    return 0
