"""Build the Snakemake command line (an argument list, never a shell string).

Running it -- the quiet console, signals, timeouts and cleanup -- is d5pipe.execute.snakemake_run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from d5pipe.config.schema import ExecutorConf
from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.execute.snakefile_api import max_threads


def repo_root() -> Path:
    """Where the Snakefile, workflow/ and profiles/ live."""
    env = os.environ.get("D5PIPE_WORKFLOW_DIR")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[3]


def snakefile() -> Path:
    return repo_root() / "Snakefile"


def profile_dirs(executor: dict[str, Any]) -> list[Path]:
    """The SLURM profile (``executor.profile``) and any ``--workflow-profile`` in ``extra_args``."""
    profile = str(executor.get("profile") or "profiles/slurm")
    p = Path(profile)
    if not p.is_absolute():
        p = repo_root() / p
    if not p.is_dir():
        raise D5PipeError(f"executor.profile: {profile} is not a directory")
    extra = [str(a) for a in setting(executor, ExecutorConf, "extra_args")]
    return [p, *(Path(value) for arg, value in zip(extra, extra[1:]) if arg == "--workflow-profile")]


def build_command(run_dir: Path, executor: dict[str, Any], jobs: int | None = None, extra: list[str] | None = None,
                  dry_run: bool = False) -> list[str]:
    """The snakemake argument list for a run directory and an executor section."""
    name = str(setting(executor, ExecutorConf, "name"))
    n_jobs = int(jobs if jobs is not None else setting(executor, ExecutorConf, "jobs"))
    cmd = [sys.executable, "-m", "snakemake",
           "--snakefile", str(snakefile()),
           "--directory", str(Path(run_dir).resolve()),
           "--rerun-incomplete", "--rerun-triggers", "mtime", "input", "--keep-going",
           "--scheduler", "greedy",  # shards are independent and only ask for cores: no ILP solve per round
           "--force-use-threads"]  # the report rule's `run:` body runs in Snakemake's process
    if name == "local":
        # each job slot gets the threads of the widest stage (executor.resources.*.cpus_per_task)
        cmd += ["--cores", str(n_jobs * max_threads(executor))]
    elif name == "slurm":
        cmd += ["--executor", "slurm", "--profile", str(profile_dirs(executor)[0]), "--jobs", str(n_jobs)]
    else:
        raise D5PipeError(f"executor.name: unknown executor {name!r} (use local or slurm)")
    retries = int(setting(executor, ExecutorConf, "retries"))
    if retries:
        cmd += ["--retries", str(retries)]
    cmd += [str(a) for a in setting(executor, ExecutorConf, "extra_args")]
    if dry_run:
        cmd.append("--dry-run")
    cmd += list(extra or [])
    return cmd


