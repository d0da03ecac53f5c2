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
    from d5pipe.results.finalize import finalize_results, write_verdict
    from d5pipe.results.report import build_report
    from d5pipe.results.verdicts import read_verdict

    rd = RunDir(args.run_dir).require_run()
    finalize_results(rd.root, rd.results_path)
    html, md = build_report(rd.root)
    write_verdict(rd.root)
    from d5pipe.provenance.bundle import write_checksums

    write_checksums(rd.root)  # rebuilt on purpose: re-sealed
    print(f"report: {html.resolve()}\nmarkdown: {md.resolve()}")
    verdict = read_verdict(rd.root)
    if verdict is not None:
        print(f"d5pipe: {verdict.line(str(html))}")
    return 0
