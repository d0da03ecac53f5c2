"""The command-line tools this process runs: any of them found on PATH and run under a time limit
(:func:`run_tool`: SLURM's clients for every layer that asks SLURM something), one started in a session
of its own killed with its whole process group (:func:`kill_group`), and the C++ compiler
this process would build with: what torch.utils.cpp_extension runs (``$CXX``, else ``c++``). A
compiled operator's build key names it (d5pipe.levels.level0.compiled), and the environment record
keeps it (d5pipe.provenance.environment), so a re-run on another compiler says so."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from d5pipe.core.errors import D5PipeError


def run_tool(argv: Sequence[str], timeout_s: float,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    """Run a command-line tool (``argv[0]`` looked up on ``env``'s PATH) under a time limit, its output
    as text; None when it is not installed. One that does not answer raises ``subprocess.TimeoutExpired``."""
    exe = shutil.which(argv[0], path=(env or os.environ).get("PATH"))
    if exe is None:
        return None
    return subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout_s,
                          env=dict(env) if env is not None else None, check=False)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill the process group of ``proc`` (started with ``start_new_session``: all it started) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def compiler() -> tuple[str, str]:
    """(path, first line of ``--version``) of the C++ compiler torch uses (``$CXX``, else ``c++``);
    a one-line error when there is none."""
    return _compiler(os.environ.get("CXX") or "c++", os.environ.get("PATH", ""))


@lru_cache(maxsize=8)
def _compiler(name: str, search: str) -> tuple[str, str]:
    path = shutil.which(name, path=search)
    if path is None:
        raise D5PipeError(f"no C++ compiler: {name!r} is not on PATH (a compiled operator needs one: install g++, "
                          "or set CXX)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    said = (out.stdout or out.stderr).strip()
    return path, said.splitlines()[0] if said else ""


def compiler_info() -> dict[str, str] | None:
    """:func:`compiler` as a record, None when there is none."""
    try:
        path, version = compiler()
    except D5PipeError:
        return None
    return {"path": path, "version": version}
