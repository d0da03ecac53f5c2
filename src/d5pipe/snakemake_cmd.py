"""Build and run the Snakemake command line (an argument list, never a shell string)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from d5pipe.errors import D5PipeError


def repo_root() -> Path:
    """Where the Snakefile, workflow/ and profiles/ live."""
    env = os.environ.get("D5PIPE_WORKFLOW_DIR")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2]


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
        cmd += ["--cores", str(n_jobs)]
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


def run_snakemake(cmd: list[str], timeout: float | None = None) -> int:
    """Run Snakemake, streaming its progress ("N of M steps done") to our stdout."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = subprocess.run(cmd, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise D5PipeError(f"snakemake did not finish within {timeout} s") from exc
    return proc.returncode
