"""``d5pipe status DIR``: finished / failed / skipped / pending points of a run, and, under the
SLURM executor, the run's pending / running / failed SLURM jobs (from squeue) and what happened to
the run (nodes down, controller or accounting outages, requeued jobs: d5pipe.results.slurm_incidents)."""

from __future__ import annotations

import argparse
from pathlib import Path

from d5pipe.execute.status import format_status, run_status, slurm_status_lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write points and checks as JUnit XML")


def main(args: argparse.Namespace) -> int:
    """Exit 0 only when every planned point ran and passed its checks (else 3, one summary line)."""
    from d5pipe.results.run_results import build_results
    from d5pipe.rundir.layout import RunDir

    rd = RunDir.of(args.run_dir).require_run()
    res = build_results(rd)  # the records, read once: where the run stands and its verdicts
    print(format_status(run_status(res.verdicts), res.verdict))
    if not res.comparisons.empty:
        n = res.comparisons["verdict"].value_counts()
        print("side by side: " + ", ".join(f"{int(n[v])} {v}" for v in n.index))
    if rd.executor.get("name") == "slurm":
        from d5pipe.execute.detach import driver_status_line

        driver = driver_status_line(rd)
        if driver is not None:
            print(driver)
        print("\n".join(slurm_status_lines(rd.root)))
        from d5pipe.results.slurm_incidents import incident_lines, live_incidents

        print("\n".join(incident_lines(live_incidents(rd))))
    if args.junit is not None:
        from d5pipe.results.junit import write_junit

        write_junit(res.frame, res.verdicts, args.junit)
    print(f"d5pipe: {res.verdict.line(str(rd.report_html))}")
    return res.verdict.exit_code
