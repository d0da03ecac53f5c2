"""Where a run stands: per stage, points ok / failed / skipped / pending, from the records;
under the SLURM executor also the run's SLURM jobs, from squeue."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.core.errors import D5PipeError
from d5pipe.results.verdicts import RunVerdict

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class StageStatus:
    stage: str
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0


def run_status(verdicts: pd.DataFrame) -> list[StageStatus]:
    """Per stage, its points by status, from the points' verdicts of the run's results
    (d5pipe.results.verdicts.point_verdicts): a planned point without a record is pending."""
    from d5pipe.results.verdicts import NOT_RUN_PREFIX

    out = []
    for stage, group in verdicts.groupby("stage", sort=False):
        status = group["status"].where(group["status"].isin(["ok", "skipped"]), "failed")
        not_run = status.eq("skipped") & group["reason"].astype(str).str.startswith(NOT_RUN_PREFIX)
        n = status.mask(not_run, "pending").value_counts()
        out.append(StageStatus(str(stage), len(group), *(int(n.get(k, 0)) for k in ("ok", "failed", "skipped", "pending"))))
    return out


def format_status(stats: list[StageStatus], verdict: RunVerdict) -> str:
    """Points per stage and status, then the verdicts and the failing points and checks (one line each)."""
    lines = [f"{'stage':<10}{'total':>8}{'ok':>8}{'failed':>8}{'skipped':>8}{'pending':>8}"]
    lines += [f"{s.stage:<10}{s.total:>8}{s.ok:>8}{s.failed:>8}{s.skipped:>8}{s.pending:>8}" for s in stats]
    lines.append(f"verdicts: {verdict.passed} pass, {verdict.failed_points + verdict.failed_checks + verdict.not_run}"
                 f" fail ({verdict.failed_checks} by a check), {verdict.unchecked} unchecked")
    lines += [f"fail {stage}/{pid}: {reason.splitlines()[0] if reason else ''}"
              for stage, pid, reason in verdict.failures[:20]]
    if len(verdict.failures) > 20:
        lines.append(f"... {len(verdict.failures) - 20} more in the report")
    return "\n".join(lines)


def slurm_status_lines(run_dir: Path) -> list[str]:
    """One line per shard job of the run that SLURM still knows (newest job per shard).

    Running and pending jobs, and jobs that did not complete with what their state means
    (``TIMEOUT``: exceeded its walltime). squeue keeps finished jobs only ``MinJobAge`` seconds.
    A failing squeue gives one line saying so (status never hangs: squeue runs under a timeout).
    """
    from d5pipe.execute.slurm import describe_job, latest_run_jobs

    try:
        jobs = latest_run_jobs(run_dir)
    except D5PipeError as exc:
        return [f"slurm: no job information ({exc})"]
    done = sum(1 for j in jobs if j.state == "COMPLETED")
    lines = [f"slurm: {len(jobs)} job(s) known to squeue, {done} completed"]
    lines += [describe_job(j) for j in jobs if j.state != "COMPLETED"]
    return lines
