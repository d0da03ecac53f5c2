"""``d5pipe report DIR``: rebuild results, verdicts and the report of a run, re-running nothing.

Checks and verdicts are re-evaluated with the run's current ``config.yaml`` (e.g. a changed
``recipe.acceptance``), from the records as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.rundir.layout import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    from d5pipe.provenance.bundle import write_checksums
    from d5pipe.results.report import build_report
    from d5pipe.results.run_results import build_results, write_results

    res = build_results(RunDir.of(args.run_dir).require_run(), accounting=True)
    write_results(res)
    html, md = build_report(res)
    write_checksums(res.run_dir.root)  # rebuilt on purpose: re-sealed
    print(f"report: {html.resolve()}\nmarkdown: {md.resolve()}")
    print(f"d5pipe: {res.verdict.line(str(html))}")
    return 0
