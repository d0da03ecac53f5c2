"""``d5pipe report DIR``: rebuild the report of an existing run without re-running anything."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.errors import D5PipeError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    from d5pipe.finalize import finalize_results
    from d5pipe.report import build_report

    run_dir: Path = args.run_dir
    if not (run_dir / "plan" / "index.json").exists():
        raise D5PipeError(f"{run_dir}: not a d5pipe run directory (no plan/index.json)")
    if not (run_dir / "results.parquet").exists():
        finalize_results(run_dir, run_dir / "results.parquet")
    html, md = build_report(run_dir)
    print(f"report: {html.resolve()}\nmarkdown: {md.resolve()}")
    return 0
