"""``d5pipe cancel RUN``: stop a run on SLURM -- its detached driver and every job of the run."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.rundir.layout import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    from d5pipe.execute.detach import cancel

    rd = RunDir.of(args.run_dir).require_run()
    cancelled = cancel(rd)
    print(f"cancelled SLURM jobs: {', '.join(cancelled) or 'none'}")
    return 0
