"""A driver that survives logout: ``d5pipe run --executor slurm --detach``.

The run is planned and checked on the login node (a bad value is still one line, exit 2), then
the same ``d5pipe run`` command -- without ``--detach`` -- is submitted as a small SLURM job of its
own. That job holds the run's lock and runs Snakemake, which submits the shard jobs from there;
nothing stays resident on the login node, so closing the terminal or killing the submitting
process changes nothing. ``RUN/driver.json`` names the driver's job: ``d5pipe status RUN`` shows
it next to the shard jobs and ``d5pipe cancel RUN`` stops both.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import read_json, write_json
from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import run_tool
from d5pipe.rundir.layout import RunDir

DRIVER_FILE = "driver.json"


def driver_path(rd: RunDir) -> Path:
    return rd.root / DRIVER_FILE


def _sbatch_argv(rd: RunDir, executor: dict[str, Any], command: Sequence[str], name: str) -> list[str]:
    from d5pipe.core.stage_resources import merged_resources

    res = merged_resources(executor, "default")
    log_dir = rd.root / "logs" / "driver"
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = ["sbatch", "--parsable", f"--job-name=d5pipe-driver-{name}", f"--output={log_dir}/%j.log",
            "--ntasks=1", "--cpus-per-task=1", "--mem=1024",
            f"--time={int(executor.get('driver_runtime_min', 1440) or 1440)}",
            f"--chdir={Path.cwd()}"]  # not RUN: the driver is not one of the run's shard jobs
    argv += [f"--{key}={res[key]}" for key in ("partition", "account") if res.get(key)]
    return [*argv, "--wrap", shlex.join(command)]


def submit_driver(rd: RunDir, executor: dict[str, Any], argv: Sequence[str], name: str) -> str:
    """Submit ``d5pipe`` with ``argv`` (already without ``--detach``) as a SLURM job; its ID."""
    command = [sys.executable, "-m", "d5pipe.cli.main", *argv]
    proc = run_tool(_sbatch_argv(rd, executor, command, name), 60)
    if proc is None:
        raise D5PipeError("--detach: sbatch not found on PATH (is this a SLURM login node?)")
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        raise D5PipeError(f"--detach: sbatch refused the driver job: {first}")
    job_id = proc.stdout.strip().split(";")[0]
    write_json(driver_path(rd), {"schema_version": 1, "job_id": job_id, "submitted": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                 "command": command})
    return job_id


def driver_job(rd: RunDir) -> dict[str, Any] | None:
    return read_json(driver_path(rd))


def driver_status_line(rd: RunDir) -> str | None:
    """``driver: SLURM job N RUNNING on node1`` (None without a detached driver)."""
    from d5pipe.execute.slurm import query_jobs

    info = driver_job(rd)
    if info is None:
        return None
    job_id = str(info["job_id"])
    try:
        jobs = [j for j in query_jobs(job_ids=[job_id]) if j.job_id == job_id]
    except D5PipeError as exc:
        return f"driver: SLURM job {job_id} (squeue: {exc})"
    if not jobs:
        return f"driver: SLURM job {job_id} (no longer known to squeue: finished)"
    job = jobs[0]
    where = f" on {job.nodelist}" if job.nodelist else ""
    return f"driver: SLURM job {job_id} {job.state}{where}"


def cancel(rd: RunDir) -> list[str]:
    """Cancel the detached driver (it then cancels its jobs) and every job of the run; their IDs."""
    from d5pipe.execute.slurm import cancel_run_jobs

    cancelled: list[str] = []
    info = driver_job(rd)
    # SIGTERM first: the driver kills Snakemake and cancels the shard jobs itself
    if info is not None and run_tool(["scancel", "--signal=TERM", "--full", str(info["job_id"])], 30) is not None:
        cancelled.append(str(info["job_id"]))
        time.sleep(2)
        run_tool(["scancel", str(info["job_id"])], 30)
    cancelled += cancel_run_jobs(rd.root)
    return cancelled
