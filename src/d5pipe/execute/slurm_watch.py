"""Never wait forever on SLURM: pick a status source that works, and watch the run's jobs.

* :func:`status_args` runs before Snakemake starts. snakemake-executor-plugin-slurm uses ``sacct``
  whenever the binary exists, and on a cluster without slurmdbd every status query then fails and
  the run waits forever. d5pipe asks ``sacct`` once; if it does not answer, ``squeue`` is used --
  but only when ``MinJobAge`` keeps finished jobs visible for at least 3 x the plugin's first
  status-check delay, otherwise one line says what to change.
* :class:`SlurmWatch` reads the job IDs the plugin prints as it submits, and every
  ``poll_s`` looks them up in the executor's view of the run (d5pipe.execute.slurm_status.Feed:
  no scheduler call), or asks SLURM about those not finished yet when that view is stale. A job that neither squeue nor sacct knows
  for longer than ``unknown_after_s``, or a status source that stops answering for that long, is
  a :class:`StatusLost` error naming the job -- the driver then stops the run instead of hanging.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

from d5pipe.core.errors import D5PipeError
from d5pipe.execute.slurm import array_tasks, query_jobs, slurm_answer
from d5pipe.execute.slurm_limits import parse_config
from d5pipe.execute.slurm_status import Feed

DEFAULT_INIT_S = 40.0
"""The plugin's default ``slurm-init-seconds-before-status-checks``."""
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")
SUBMITTED_ARRAY = re.compile(r"Submitted array job with Snakemake IDs ([\d,]+) and SLURM job ID (\d+)\. "
                             r"The individual task IDs are (\d+)-(\d+)")
FINISHED = re.compile(r"Finished jobid: (\d+)")
FAILED_JOBID = re.compile(r"^\s+jobid: (\d+)")


class StatusLost(D5PipeError):
    """SLURM stopped answering about a job of the run."""


def sacct_works(env: Mapping[str, str] | None = None, timeout_s: float = 20.0) -> tuple[bool, str]:
    """Whether ``sacct`` answers on this cluster (and why not)."""
    proc = slurm_answer(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now-1hours"], timeout_s, env)
    if proc is None:
        return False, "sacct is missing or did not answer"
    text = (proc.stderr or "").strip()
    if proc.returncode != 0 or "error" in text.lower() or "disabled" in text.lower():
        return False, text.splitlines()[0] if text else f"sacct exit {proc.returncode}"
    return True, ""


def min_job_age(env: Mapping[str, str] | None = None, timeout_s: float = 20.0) -> int | None:
    """``MinJobAge`` in seconds from ``scontrol show config`` (None when it cannot be read)."""
    proc = slurm_answer(["scontrol", "show", "config"], timeout_s, env)
    if proc is None or proc.returncode != 0:
        return None
    return parse_config(proc.stdout).get("MinJobAge")


def init_seconds(profiles: Sequence[Path]) -> float:
    """``slurm-init-seconds-before-status-checks`` of the profiles (the last one that sets it)."""
    value = DEFAULT_INIT_S
    for profile in profiles:
        try:
            data = yaml.safe_load((Path(profile) / "config.yaml").read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and "slurm-init-seconds-before-status-checks" in data:
            value = float(data["slurm-init-seconds-before-status-checks"])
    return value


def status_args(profiles: Sequence[Path], env: Mapping[str, str] | None = None) -> list[str]:
    """Extra Snakemake arguments choosing a status source that works here (see module docstring)."""
    works, why = sacct_works(env)
    if works:
        return ["--slurm-status-command", "sacct"]
    init = init_seconds(profiles)
    age = min_job_age(env)
    if age is None:
        raise D5PipeError(f"executor slurm: sacct does not work here ({why}) and MinJobAge cannot be read "
                          "(scontrol show config); is this a SLURM login node?")
    if age >= 3 * init:
        return ["--slurm-status-command", "squeue"]
    raise D5PipeError(
        f"executor slurm: sacct does not work here ({why}) and MinJobAge={age}s is below 3 x "
        f"slurm-init-seconds-before-status-checks ({init:g}s), so squeue would forget finished jobs; "
        "enable accounting (slurmdbd), raise MinJobAge, or lower that setting in your profile")


class SlurmWatch:
    """Follows the plugin's submissions in Snakemake's output and asks SLURM about them."""

    def __init__(self, env: Mapping[str, str] | None, poll_s: float = 30.0, unknown_after_s: float = 600.0,
                 view: Callable[[], Feed | None] = lambda: None) -> None:
        self.env, self.view = env, view
        self.poll_s, self.unknown_after_s = poll_s, unknown_after_s
        self.jobs: dict[str, str] = {}
        """Snakemake job ID -> SLURM job ID (``123`` or ``123_4`` for an array task)."""
        self._unknown_since: dict[str, float] = {}
        self._silent_since: float | None = None
        self._last = time.monotonic()

    def feed(self, line: str) -> None:
        m = SUBMITTED.search(line)
        if m:
            self.jobs[m.group(1)] = m.group(2)
            return
        m = SUBMITTED_ARRAY.search(line)
        if m:
            ids, base, lo = m.group(1).split(","), m.group(2), int(m.group(3))
            for k, sid in enumerate(ids):
                self.jobs[sid] = f"{base}_{lo + k}"
            return
        m = FINISHED.search(line) or FAILED_JOBID.search(line)
        if m:
            self.jobs.pop(m.group(1), None)

    def _known(self, ids: list[str]) -> set[str] | None:
        view = self.view()
        if view is not None:  # the executor's last answer; none yet: nothing to judge
            return {i for i in ids if not view.lost(i)}
        try:
            queued = query_jobs(job_ids=sorted({i.split("_")[0] for i in ids}), timeout_s=20.0, env=self.env)
            found = set().union(*(array_tasks(j.job_id) for j in queued))  # pending tasks come as 751_[434-500%20]
        except D5PipeError:
            return None
        known = {i for i in ids if i in found or i.split("_")[0] in found}
        missing = [i for i in ids if i not in known]
        if missing:
            proc = slurm_answer(["sacct", "-n", "-X", "-P", "-o", "JobID", "-j", ",".join(missing)], 20.0, self.env)
            if proc is not None and proc.returncode == 0:
                listed = {line.strip() for line in proc.stdout.splitlines()}
                known |= {i for i in missing if i in listed or i.split("_")[0] in listed}
        return known

    def check(self) -> None:
        """Raise :class:`StatusLost` when SLURM has lost a job or stopped answering."""
        now = time.monotonic()
        if now - self._last < self.poll_s or not self.jobs:
            return
        self._last = now
        ids = list(self.jobs.values())
        known = self._known(ids)
        if known is None:
            self._silent_since = self._silent_since or now
            if now - self._silent_since > self.unknown_after_s:
                raise StatusLost(f"executor slurm: squeue has not answered for {now - self._silent_since:.0f} s; "
                                 f"waiting jobs: {', '.join(ids[:5])}")
            return
        self._silent_since = None
        for sid in ids:
            if sid in known:
                self._unknown_since.pop(sid, None)
                continue
            since = self._unknown_since.setdefault(sid, now)
            if now - since > self.unknown_after_s:
                raise StatusLost(f"executor slurm: job {sid} is unknown to squeue and sacct for "
                                 f"{now - since:.0f} s (finished and forgotten, or lost); the run stops "
                                 "here -- run it again to resume")
