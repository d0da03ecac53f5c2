"""SLURM helpers: job provenance, job-state queries, and per-stage resources for Snakemake.

* :func:`slurm_provenance` reads ``SLURM_JOB_ID`` / ``SLURM_JOB_NODELIST`` / ``SLURM_CLUSTER_NAME``
  for a point's record.
  snakemake-executor-plugin-slurm's job step drops most ``SLURM_*`` variables (it keeps
  ``SLURM_JOB_ID``) when a rule runs without the ``srun -n1`` wrapper (``mpi`` resource set),
  so a missing node list is looked up with ``squeue``.
* :func:`query_jobs` asks ``squeue`` about jobs, always under a timeout: a status query that
  hangs must never hang d5pipe. :func:`run_jobs` finds the jobs of one run directory (the
  plugin submits every job with ``-D RUN``, so squeue's working directory names the run),
  :func:`cancel_run_jobs` cancels them, :func:`describe_job` says what a job's state means
  (``TIMEOUT``: the shard exceeded its walltime).
* resources for submission are mapped in d5pipe.execute.resources.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path

from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import run_tool

_SQUEUE_FORMAT = "%i|%T|%j|%k|%N|%l|%M|%r|%Z|%V"

STATE_MEANING: dict[str, str] = {
    "TIMEOUT": "exceeded its walltime (time limit {time_limit}); raise "
               "executor.resources.{stage}.runtime_min or lower shards.points_per_shard",
    "OUT_OF_MEMORY": "ran out of memory; raise executor.resources.{stage}.mem_mb",
    "CANCELLED": "was cancelled (scancel or preemption); finished points are kept",
    "PREEMPTED": "was preempted; finished points are kept",
    "NODE_FAIL": "lost its node; finished points are kept",
    "FAILED": "failed; see the shard's log under logs/ and logs/slurm/",
}
"""What d5pipe tells the user about a shard job in one of these SLURM states."""

TERMINAL_STATES: frozenset[str] = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "PREEMPTED",
})
"""squeue states after which a job will not run again (unless SLURM requeues it)."""


@dataclass(frozen=True)
class SlurmJob:
    """One line of ``squeue --states=all`` output."""

    job_id: str
    state: str
    name: str
    comment: str
    nodelist: str
    time_limit: str
    elapsed: str
    exit_reason: str
    work_dir: str = ""
    submit_time: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def rule(self) -> str:
        """Snakemake rule and wildcards from the plugin's ``--comment`` ("level0 s00000")."""
        text = self.comment[len("rule_"):] if self.comment.startswith("rule_") else self.comment
        rule, _, wildcards = text.partition("_wildcards_")
        return f"{rule} {wildcards}".strip()


def slurm_answer(argv: Sequence[str], timeout_s: float,
                 env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    """:func:`~d5pipe.core.toolchain.run_tool` (a SLURM client), with None also when the command does
    not answer within ``timeout_s``."""
    try:
        return run_tool(argv, timeout_s, env)
    except subprocess.TimeoutExpired:
        return None


def _run_squeue(args: Sequence[str], timeout_s: float,
                env: Mapping[str, str] | None) -> str:
    try:
        proc = run_tool(["squeue", *args], timeout_s, env)
    except subprocess.TimeoutExpired as exc:
        raise D5PipeError(f"executor slurm: squeue did not answer within {timeout_s} s") from exc
    if proc is None:
        raise D5PipeError("executor slurm: squeue not found on PATH")
    if proc.returncode != 0:
        raise D5PipeError(f"executor slurm: squeue failed: {proc.stderr.strip()}")
    return proc.stdout


def parse_squeue(text: str) -> list[SlurmJob]:
    """Parse lines written with ``--format=%i|%T|%j|%k|%N|%l|%M|%r|%Z|%V --noheader``."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != len(fields(SlurmJob)) or not parts[0]:
            continue
        jobs.append(SlurmJob(*parts))
    return jobs


def array_tasks(job_id: str) -> set[str]:
    """The task IDs a squeue job ID stands for: ``751_[434-500%20]`` (an array's tasks not started
    yet, as squeue prints them without ``-r``) -> 751_434 ... 751_500; any other ID -> itself."""
    base, _, rest = job_id.partition("_[")
    if not rest:
        return {job_id}
    out: set[str] = set()
    for part in rest.split("]", 1)[0].split("%", 1)[0].split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (hi.isdigit() or not hi):
            out.update(f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1))
    return out


def query_jobs(name: str | None = None, job_ids: Sequence[str] = (), timeout_s: float = 10.0,
               env: Mapping[str, str] | None = None) -> list[SlurmJob]:
    """The jobs ``squeue`` still knows (running and, for ``MinJobAge`` seconds, finished).

    ``name``: SLURM job name; snakemake-executor-plugin-slurm names every job of one
    Snakemake run with that run's UUID ("SLURM run ID" in its log). ``job_ids``: explicit IDs.
    Raises D5PipeError when squeue is missing, fails or does not answer within ``timeout_s``.
    """
    args = ["--noheader", "--states=all", f"--format={_SQUEUE_FORMAT}"]
    if name:
        args += ["--name", name]
    if job_ids:
        args += ["--jobs", ",".join(job_ids)]
    return parse_squeue(_run_squeue(args, timeout_s, env))


def run_jobs(run_dir: str | Path, since: datetime | None = None, timeout_s: float = 10.0,
             env: Mapping[str, str] | None = None) -> list[SlurmJob]:
    """The jobs squeue knows whose working directory is ``run_dir``, oldest first.

    ``since``: only jobs submitted at or after this local time (squeue prints local time).
    """
    target = os.path.realpath(run_dir)
    out = []
    for job in query_jobs(timeout_s=timeout_s, env=env):
        if not job.work_dir or os.path.realpath(job.work_dir) != target:
            continue
        if since is not None and job.submit_time:
            try:
                if datetime.fromisoformat(job.submit_time) < since.replace(microsecond=0):
                    continue
            except ValueError:
                pass
        out.append(job)
    return sorted(out, key=lambda j: _job_sort_key(j.job_id))


def _job_sort_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head) if head.isdigit() else 0, job_id)


def latest_run_jobs(run_dir: str | Path, since: datetime | None = None) -> list[SlurmJob]:
    """The newest job of ``run_dir`` for each rule+wildcards (a resumed shard supersedes its killed
    job), oldest first (see :func:`run_jobs`)."""
    latest = {job.rule or job.job_id: job for job in run_jobs(run_dir, since)}
    return sorted(latest.values(), key=lambda j: _job_sort_key(j.job_id))


def cancel_run_jobs(run_dir: str | Path, since: datetime | None = None, timeout_s: float = 10.0,
                    env: Mapping[str, str] | None = None) -> list[str]:
    """``scancel`` the unfinished jobs of ``run_dir`` (see :func:`run_jobs`); their IDs."""
    ids = [j.job_id for j in run_jobs(run_dir, since, timeout_s, env) if not j.finished]
    try:
        if ids:
            run_tool(["scancel", *ids], timeout_s, env)
    except subprocess.TimeoutExpired as exc:
        raise D5PipeError(f"executor slurm: scancel did not answer within {timeout_s} s") from exc
    return ids


def describe_job(job: SlurmJob) -> str:
    """One line: job ID, rule/shard, state and, for a failure, what it means."""
    line = f"slurm job {job.job_id} ({job.rule or job.name}): {job.state}"
    if job.state in ("PENDING", "RUNNING"):
        detail = job.exit_reason if job.state == "PENDING" else f"elapsed {job.elapsed}"
        return f"{line} ({detail}, time limit {job.time_limit})"
    meaning = STATE_MEANING.get(job.state)
    if job.state == "COMPLETING" and job.exit_reason == "TimeLimit":
        meaning = STATE_MEANING["TIMEOUT"]  # being killed for its time limit right now
    if meaning:
        stage = job.rule.split(" ", 1)[0] if job.rule else "<stage>"
        line += " - " + meaning.format(time_limit=job.time_limit, stage=stage)
    return line


def slurm_provenance(environ: Mapping[str, str] | None = None,
                     timeout_s: float = 5.0) -> dict[str, str | None]:
    """``{"slurm_job_id", "slurm_nodelist", "slurm_cluster"}`` of the SLURM job this process runs in.

    All are None outside SLURM. When the job ID is known but the node list was dropped
    from the environment, a one-node job's node is ``SLURMD_NODENAME``; otherwise ``squeue`` is
    asked (best effort: None if it cannot answer).
    """
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if job_id and not nodelist and env.get("SLURM_JOB_NUM_NODES", "1") == "1":
        nodelist = env.get("SLURMD_NODENAME")  # a one-node job runs where this process runs: no query
    if job_id and not nodelist:
        try:
            jobs = query_jobs(job_ids=[job_id], timeout_s=timeout_s, env=env)
        except D5PipeError:
            jobs = []
        nodelist = next((j.nodelist for j in jobs if j.job_id == job_id and j.nodelist), None)
    cluster = env.get("SLURM_CLUSTER_NAME") if job_id else None  # slurmd sets it in every job
    return {"slurm_job_id": job_id or None, "slurm_nodelist": nodelist or None, "slurm_cluster": cluster or None}
