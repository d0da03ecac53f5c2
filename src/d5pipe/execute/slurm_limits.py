"""A SLURM site's limits on what one user may submit, and how d5pipe's submissions fit under them.

Read once per run, from the cluster itself (:func:`read_limits`): ``scontrol show config`` gives
``MaxArraySize`` (a cap on the array *index*: ``--array=1001-2000`` is rejected where it is 1001,
so every chunk is numbered from 1) and ``MaxJobCount`` (the jobs slurmctld holds, finished ones
included for ``MinJobAge`` seconds, each array task counted); ``sacctmgr show assoc`` gives the
user's ``MaxSubmitJobs`` (pending and running jobs, each array task counted), where the site sets
one. :func:`submission_plan` says how many arrays and waves a sweep of ``shards`` takes under them;
``d5pipe plan --executor slurm`` prints it, and d5pipe's SLURM executor
(d5pipe.execute.slurm_executor) holds every submission to it.
"""

from __future__ import annotations

import base64
import getpass
import json
import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from d5pipe.execute.slurm import slurm_answer

HEADROOM = 0.05
"""Share of ``MaxJobCount`` d5pipe leaves to other users and to jobs submitted by hand."""
DEFAULT_MAX_ARRAY_SIZE = 1001
DEFAULT_MAX_JOB_COUNT = 10000
DEFAULT_MIN_JOB_AGE = 300


JOB_SCRIPTS = Path(".snakemake") / "d5j"
"""Where each job's command is written (relative to the run directory, where every job starts)."""
WRAP_BUDGET = 96 * 1024
"""Bytes the array's task commands may take in one call: under Linux's 128 KiB for one argument
(``MAX_ARG_STRLEN``), which the ``sbatch`` call (one ``sh -c`` argument) and each task's
``--slurm-jobstep-array-execs`` must both fit."""


def tasks_per_call(command: str, budget: int = WRAP_BUDGET) -> int:
    """How many tasks with commands like ``command`` fit in one array call: the plugin sends each
    as ``"<index>": "<zlib hex>"`` in base64'd JSON."""
    entry = json.dumps({"100000": zlib.compress(command.encode(), level=9).hex()})
    per_task = len(base64.b64encode(entry.encode()))
    return max(1, budget // per_task)


def script_call(digest: str, where: Path = JOB_SCRIPTS) -> str:
    """A job's command line in the array call: ``sh`` of its script (d5pipe.execute.slurm_job_scripts.job_script)."""
    return f"sh {where / digest}"


TASKS_PER_CALL = tasks_per_call(script_call("9f86d081884c7d65"))
"""Tasks of one array call, with each task's command ``sh`` of its script."""


@dataclass(frozen=True)
class SiteLimits:
    """What the site allows (SLURM's defaults where it could not be read; ``source`` says which)."""

    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE
    """``MaxArraySize``: array indices run from 0 to this minus one."""
    max_job_count: int = DEFAULT_MAX_JOB_COUNT
    """``MaxJobCount``: jobs slurmctld holds at once, every array task counted."""
    max_submit_jobs: int | None = None
    """The user's association ``MaxSubmitJobs`` (None: no limit set)."""
    min_job_age: int = DEFAULT_MIN_JOB_AGE
    """``MinJobAge``: seconds a finished job still counts towards ``MaxJobCount``."""
    source: str = "defaults"

    @property
    def job_room(self) -> int:
        """Jobs d5pipe keeps in the controller at most: ``MaxJobCount`` less :data:`HEADROOM`."""
        return max(1, self.max_job_count - max(1, math.ceil(self.max_job_count * HEADROOM)))

    @property
    def submit_room(self) -> int:
        """Jobs d5pipe keeps pending or running at most (the association's limit, else the job room)."""
        return min(self.job_room, self.max_submit_jobs) if self.max_submit_jobs else self.job_room

    def array_chunk(self, array_limit: int, tasks: int = 0) -> int:
        """Tasks per array: ``executor.array_limit``, at most ``MaxArraySize - 1`` (indices 1..N),
        at most what may be submitted at once and at most :data:`TASKS_PER_CALL`. A stage of more
        ``tasks`` than may be submitted at once goes in arrays of at most half that room: one
        array runs while the next fills, and the one before is purged (``MinJobAge``) meanwhile,
        so the waves overlap instead of each waiting for the last to leave slurmctld."""
        chunk = min(int(array_limit), self.max_array_size - 1, self.submit_room, TASKS_PER_CALL)
        if tasks > self.submit_room:
            chunk = min(chunk, self.submit_room // 2)
        return max(1, chunk)

    def describe(self) -> str:
        submit = self.max_submit_jobs if self.max_submit_jobs else "unlimited"
        return (f"MaxArraySize={self.max_array_size} MaxJobCount={self.max_job_count} "
                f"MaxSubmitJobs={submit} MinJobAge={self.min_job_age}s ({self.source})")


def parse_config(text: str) -> dict[str, int]:
    """``MaxArraySize``, ``MaxJobCount`` and ``MinJobAge`` from ``scontrol show config``."""
    out: dict[str, int] = {}
    for key in ("MaxArraySize", "MaxJobCount", "MinJobAge"):
        m = re.search(rf"^{key}\s*=\s*(\d+)\s*(\w*)", text, re.M)
        if m:
            scale = 3600 if m.group(2).lower() in ("h", "hour", "hours") else 1
            out[key] = int(m.group(1)) * scale
    return out


def parse_max_submit(text: str) -> int | None:
    """The smallest ``MaxSubmitJobs`` in ``sacctmgr -n -P show assoc format=MaxSubmit`` lines."""
    values = [int(v) for v in (line.strip() for line in text.splitlines()) if v.isdigit()]
    return min(values) if values else None


def read_limits(env: Mapping[str, str] | None = None, user: str | None = None,
                timeout_s: float = 20.0) -> SiteLimits:
    """The site's limits: one ``scontrol show config`` and one ``sacctmgr show assoc``."""
    conf = slurm_answer(["scontrol", "show", "config"], timeout_s, env)
    values = parse_config(conf.stdout) if conf is not None and conf.returncode == 0 else {}
    max_submit = None
    assoc = slurm_answer(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user or getpass.getuser()}",
                          "format=MaxSubmit"], timeout_s, env)
    if assoc is not None and assoc.returncode == 0:
        max_submit = parse_max_submit(assoc.stdout)
    return SiteLimits(max_array_size=values.get("MaxArraySize", DEFAULT_MAX_ARRAY_SIZE),
                      max_job_count=values.get("MaxJobCount", DEFAULT_MAX_JOB_COUNT),
                      max_submit_jobs=max_submit,
                      min_job_age=values.get("MinJobAge", DEFAULT_MIN_JOB_AGE),
                      source="scontrol show config" if values else "SLURM defaults (scontrol did not answer)")


@dataclass(frozen=True)
class SubmissionPlan:
    """How a stage's shards go to SLURM under the site's limits."""

    shards: int
    chunk: int
    arrays: int
    waves: int
    """Rounds of submission: more than one when the sweep does not fit under the limits at once."""

    def describe(self) -> str:
        return (f"{self.shards} shards -> {self.arrays} array(s) of <= {self.chunk} tasks"
                f" (indices 1..{min(self.chunk, self.shards)}), {self.waves} wave(s)")


def submission_plan(shards: int, limits: SiteLimits, array_limit: int) -> SubmissionPlan:
    """Arrays and waves of ``shards`` array tasks under ``limits`` (see the module docstring)."""
    chunk = limits.array_chunk(array_limit, shards)
    arrays = math.ceil(shards / chunk) if shards else 0
    per_wave = max(1, limits.submit_room // chunk)
    return SubmissionPlan(shards=shards, chunk=chunk, arrays=arrays, waves=math.ceil(arrays / per_wave) if arrays else 0)


def plan_lines(shards_per_stage: dict[str, int], executor: dict[str, object],
               limits: SiteLimits) -> list[str]:
    """What ``d5pipe plan --executor slurm`` prints: the site's limits, each array stage's arrays and
    waves, and the run-wide limit on tasks in flight."""
    from d5pipe.config.schema import ExecutorConf
    from d5pipe.core.fields import setting
    from d5pipe.levels.registry import array_job

    array_limit = int(setting(executor, ExecutorConf, "array_limit"))
    arrays = bool(setting(executor, ExecutorConf, "arrays"))
    lines = [f"slurm: site limits {limits.describe()}",
             f"slurm: at most {int(setting(executor, ExecutorConf, 'jobs'))} tasks of the run in flight "
             "(executor.jobs, across stages)"]
    for stage, shards in shards_per_stage.items():
        if arrays and array_job(stage, placed=False):
            lines.append(f"slurm: {stage}: {submission_plan(shards, limits, array_limit).describe()}")
        else:
            lines.append(f"slurm: {stage}: {shards} job(s), one sbatch each")
    return lines
