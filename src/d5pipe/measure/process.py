"""Process lifetime: nothing d5pipe starts outlives the process that started it. Used by the shard's
point workers (d5pipe.execute.supervisor), Snakemake's jobs (d5pipe.execute.jobs), the Snakemake
driver and level 3's launchers and rank processes.

And which boot of which machine a process runs in (:func:`boot_id`): level 3's ranks record it (ranks
that report the same one share a machine), the environment record's cache key includes it
(d5pipe.provenance.environment).

And how a process that skips the interpreter's teardown still lets libraries clean up (:func:`exit_now`,
:func:`forget_exit_handlers`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1
try:  # loaded once here: die_with_parent also runs between fork and exec (preexec_fn)
    _PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _PRCTL = None


def boot_id() -> str:
    """The kernel's boot ID (``/proc/sys/kernel/random/boot_id``; empty where there is none): processes
    that read the same one run on one machine, in one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux; best effort)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def exit_with_parent(poll_s: float = 1.0) -> None:
    """Stop this process (``os._exit``) once its parent is gone, checked every ``poll_s``.

    For Snakemake's jobs: their parent is a Snakemake that PR_SET_PDEATHSIG kills with the driver;
    a job that polls for that is not left running (PDEATHSIG itself would fire when the
    Snakemake *thread* that started the job ends, which is not when Snakemake ends).
    """
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(1)  # a shard's worker follows by PR_SET_PDEATHSIG

    threading.Thread(target=watch, name="d5pipe-parent-watch", daemon=True).start()


def exit_now(code: int) -> NoReturn:
    """End this process at once (``os._exit``), skipping the interpreter's teardown (most of a second
    once torch is imported), after flushing its standard streams and running the exit handlers
    registered in it (:mod:`atexit`): libraries delete there what they made. TensorFlow's autograph,
    for one, writes each function it converts to a file in the temporary directory and deletes it
    at exit; a level-2 TensorFlow point left 18 such files behind for every process that skipped them."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()  # a handler's error is printed and the others still run
    os._exit(code)


def forget_exit_handlers() -> None:
    """In a forked child: drop the exit handlers it inherited (they clean up after the parent, which
    runs them itself), so that :func:`exit_now` runs only those registered in the child."""
    atexit._clear()
