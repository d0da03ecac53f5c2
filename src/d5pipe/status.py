"""Where a run stands: per stage, points ok / failed / skipped / pending, from the records;
under the SLURM executor also the run's SLURM jobs, from squeue."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5pipe.errors import D5PipeError
from d5pipe.finalize import planned_ids
from d5pipe.records import record_path


@dataclass
class StageStatus:
    stage: str
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)


def run_status(run_dir: Path) -> list[StageStatus]:
    run_dir = Path(run_dir)
    if not (run_dir / "plan" / "index.json").exists():
        raise D5PipeError(f"{run_dir}: not a d5pipe run directory (no plan/index.json)")
    out = []
    for stage, ids in planned_ids(run_dir).items():
        st = StageStatus(stage, total=len(ids))
        for pid in ids:
            try:
                with open(record_path(run_dir, stage, pid), encoding="utf-8") as fh:
                    rec: dict[str, Any] = json.load(fh)
            except (FileNotFoundError, json.JSONDecodeError):
                st.pending += 1
                continue
            status = rec.get("status")
            if status == "ok":
                st.ok += 1
            elif status == "skipped":
                st.skipped += 1
            else:
                st.failed += 1
                st.failures.append((pid, str(rec.get("error", ""))))
        out.append(st)
    return out


def format_status(stats: list[StageStatus], running: dict[str, str] | None = None) -> str:
    lines = [f"{'stage':<10}{'total':>8}{'ok':>8}{'failed':>8}{'skipped':>8}{'pending':>8}"]
    for s in stats:
        lines.append(f"{s.stage:<10}{s.total:>8}{s.ok:>8}{s.failed:>8}{s.skipped:>8}{s.pending:>8}")
    for s in stats:
        for pid, err in s.failures[:20]:
            lines.append(f"failed {s.stage}/{pid}: {err.splitlines()[0] if err else ''}")
    for job, state in (running or {}).items():
        lines.append(f"slurm job {job}: {state}")
    return "\n".join(lines)


def run_executor(run_dir: Path) -> str:
    """``executor.name`` of the run's ``config.yaml`` ("local" when unreadable)."""
    import yaml

    try:
        with open(Path(run_dir) / "config.yaml", encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return "local"
    ex = cfg.get("executor", {}) if isinstance(cfg, dict) else {}
    return str((ex or {}).get("name", "local"))


def slurm_status_lines(run_dir: Path) -> list[str]:
    """One line per shard job of the run that SLURM still knows (newest job per shard).

    Running and pending jobs, and jobs that did not complete with what their state means
    (``TIMEOUT``: exceeded its walltime). squeue keeps finished jobs only ``MinJobAge`` seconds.
    A failing squeue gives one line saying so (status never hangs: squeue runs under a timeout).
    """
    from d5pipe.slurm import describe_job, latest_per_rule, run_jobs

    try:
        jobs = latest_per_rule(run_jobs(run_dir))
    except D5PipeError as exc:
        return [f"slurm: no job information ({exc})"]
    done = sum(1 for j in jobs if j.state == "COMPLETED")
    lines = [f"slurm: {len(jobs)} job(s) known to squeue, {done} completed"]
    lines += [describe_job(j) for j in jobs if j.state != "COMPLETED"]
    return lines
