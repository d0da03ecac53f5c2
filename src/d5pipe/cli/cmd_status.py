"""``d5pipe status DIR``: finished / failed / skipped / pending points of a run, and, under the
SLURM executor, the run's pending / running / failed SLURM jobs (from squeue)."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.execute.status import format_status, run_executor, run_status, slurm_status_lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write points and checks as JUnit XML")


def main(args: argparse.Namespace) -> int:
    """Exit 0 only when every planned point ran and passed its checks (else 3, one summary line)."""
    from d5pipe.results.finalize import results_frame
    from d5pipe.results.verdicts import run_verdict
    from d5pipe.rundir.layout import RunDir

    stats = run_status(args.run_dir)
    frame = results_frame(args.run_dir)
    verdict = run_verdict(frame)
    print(format_status(stats, verdict))
    if run_executor(args.run_dir) == "slurm":
        from d5pipe.execute.detach import driver_status_line

        driver = driver_status_line(RunDir(args.run_dir))
        if driver is not None:
            print(driver)
        print("\n".join(slurm_status_lines(args.run_dir)))
    if args.junit is not None:
        from d5pipe.results.junit import write_junit

        write_junit(frame, args.junit)
    print(f"d5pipe: {verdict.line(str(RunDir(args.run_dir).report_html))}")
    return verdict.exit_code
