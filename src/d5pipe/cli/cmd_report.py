"""``d5pipe report DIR``: rebuild the report of an existing run without re-running anything."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.rundir.layout import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    from d5pipe.results.finalize import finalize_results
    from d5pipe.results.report import build_report

    rd = RunDir(args.run_dir).require_run()
    run_dir = rd.root
    if not rd.results_path.exists():
        finalize_results(run_dir, rd.results_path)
    html, md = build_report(run_dir)
    print(f"report: {html.resolve()}\nmarkdown: {md.resolve()}")
    return 0
