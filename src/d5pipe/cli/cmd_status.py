"""``d5pipe status DIR``: finished / failed / skipped / pending points of a run, and, under the
SLURM executor, the run's pending / running / failed SLURM jobs (from squeue)."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.execute.status import format_status, run_executor, run_status, slurm_status_lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    print(format_status(run_status(args.run_dir)))
    if run_executor(args.run_dir) == "slurm":
        print("\n".join(slurm_status_lines(args.run_dir)))
    return 0
