"""Build and run the Snakemake command line (an argument list, never a shell string)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from d5pipe import D5PipeError
from d5pipe.execute.workflow_api import max_threads


def repo_root() -> Path:
    """Where the Snakefile, workflow/ and profiles/ live."""
    env = os.environ.get("D5PIPE_WORKFLOW_DIR")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[3]


def snakefile() -> Path:
    return repo_root() / "Snakefile"


def build_command(
    run_dir: Path,
    executor: dict[str, Any],
    jobs: int | None = None,
    extra: list[str] | None = None,
    dry_run: bool = False,
) -> list[str]:
    """The snakemake argument list for a run directory and an executor section."""
    name = str(executor.get("name", "local"))
    n_jobs = int(jobs if jobs is not None else executor.get("jobs", 1) or 1)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile()),
        "--directory",
        str(Path(run_dir).resolve()),
        "--rerun-incomplete",
        "--rerun-triggers",
        "mtime",
        "input",
        "--quiet",
        "rules",
        "host",
    ]
    if name == "local":
        # each job slot gets the threads of the widest stage (executor.resources.*.cpus_per_task)
        cmd += ["--cores", str(n_jobs * max_threads(executor))]
    elif name == "slurm":
        profile = str(executor.get("profile") or "profiles/slurm")
        p = Path(profile)
        if not p.is_absolute():
            p = repo_root() / p
        if not p.is_dir():
            raise D5PipeError(f"executor.profile: {profile} is not a directory")
        cmd += ["--executor", "slurm", "--profile", str(p), "--jobs", str(n_jobs)]
    else:
        raise D5PipeError(f"executor.name: unknown executor {name!r} (use local or slurm)")
    retries = int(executor.get("retries", 0) or 0)
    if retries:
        cmd += ["--retries", str(retries)]
    cmd += [str(a) for a in executor.get("extra_args", []) or []]
    if dry_run:
        cmd.append("--dry-run")
    cmd += list(extra or [])
    return cmd


def _option_value(cmd: list[str], option: str) -> str | None:
    """The argument after ``option`` in ``cmd`` (None when absent)."""
    for i, arg in enumerate(cmd[:-1]):
        if arg == option:
            return cmd[i + 1]
    return None


def _uses_slurm(cmd: list[str]) -> bool:
    return _option_value(cmd, "--executor") == "slurm"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL Snakemake and everything it started locally (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _report_slurm_failures(run_dir: str, since: datetime) -> None:
    """After a failed SLURM run: print each shard job that did not complete, and why."""
    from d5pipe.execute.slurm import describe_job, latest_per_rule, run_jobs

    try:
        jobs = latest_per_rule(run_jobs(run_dir, since=since))
    except D5PipeError as exc:
        print(f"d5pipe: cannot list the run's SLURM jobs ({exc})", file=sys.stderr, flush=True)
        return
    for job in jobs:
        if job.state != "COMPLETED":
            print(f"d5pipe: {describe_job(job)}", file=sys.stderr, flush=True)


def run_snakemake(cmd: list[str], timeout: float | None = None) -> int:
    """Run Snakemake, streaming its progress ("N of M steps done") to our stdout.

    Snakemake runs in its own session. ``timeout`` is a hard limit: Snakemake and its local
    children are SIGKILLed (a SIGTERMed Snakemake would wait for its SLURM jobs) and, under the
    SLURM executor, the run's unfinished SLURM jobs are cancelled, then D5PipeError is raised.
    Ctrl-C / SIGTERM are passed on to Snakemake (which then cancels its own jobs).
    """
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    run_dir = _option_value(cmd, "--directory")
    slurm = _uses_slurm(cmd) and run_dir is not None
    since = datetime.now()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()

    def _forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    if in_main:
        signal.signal(signal.SIGTERM, _forward)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        msg = f"snakemake did not finish within {timeout} s (killed)"
        if slurm:
            from d5pipe.execute.slurm import cancel_run_jobs

            assert run_dir is not None
            cancelled = cancel_run_jobs(run_dir, since=since)
            msg += f"; cancelled SLURM jobs: {', '.join(cancelled) or 'none'}"
        raise D5PipeError(msg) from exc
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if rc != 0 and slurm:
        assert run_dir is not None
        _report_slurm_failures(run_dir, since)
    return rc
