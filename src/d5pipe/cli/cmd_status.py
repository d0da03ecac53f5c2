"""``d5pipe status DIR``: finished / failed / skipped / pending points of a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.status import format_status, run_status


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    print(format_status(run_status(args.run_dir)))
    return 0
