"""Run a shard's points in a worker process, so a point that crashes, blows its memory or hangs
fails alone and the shard goes on.

The shard process (the parent) imports the stage's code once, then forks one **worker**; the
worker runs points one after another as the parent sends them (a pipe round trip per point, tens
of microseconds) and writes each point's record itself. The parent waits for each point with
``shards.point_timeout_s`` as the limit:

* the worker answers -> the point is done (its record says ok / failed / skipped);
* the worker dies (any signal, ``os._exit``, the kernel's OOM killer) -> the parent writes the
  point's record as ``failed`` with the cause (``crashed: killed by signal 9``, ``crashed: exit
  137``) and forks a fresh worker for the next point;
* no answer within the limit -> the parent kills the worker (and its process group) and records
  ``failed: timeout after N s``.

A worker is forked from a parent that has imported torch but run no torch operation and never
touched CUDA, so the fork is cheap and safe. Workers die with their parent (``PR_SET_PDEATHSIG``)
and are not daemonic processes, so that a point may start its own (a DataLoader's workers). A worker
that ends runs the exit handlers registered in it, not its parent's (d5pipe.measure.process.exit_now:
libraries delete there what they made, such as TensorFlow's autograph files); a killed one runs none.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from d5pipe.measure.process import die_with_parent, exit_now, forget_exit_handlers

PointFn = Callable[[int], str]
"""Runs point ``i`` of the shard in the worker, writes its record, returns its status."""

def describe_exit(exitcode: int | None) -> str:
    """``killed by signal 9 (SIGKILL)`` / ``exit 137`` for a dead worker's exit code."""
    if exitcode is None:
        return "vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exitcode} ({name})"
    return f"exit {exitcode}"


@dataclass(frozen=True)
class Result:
    """How one point ended from the parent's point of view."""

    status: str
    """``ok``/``failed``/``skipped`` as the worker recorded it, or ``crashed`` / ``timeout``."""
    detail: str = ""
    seconds: float = 0.0


def _worker_loop(conn: Connection, run: PointFn, on_exit: Callable[[], None] | None) -> None:
    die_with_parent()
    forget_exit_handlers()  # the parent's are the parent's; the worker runs its own when it ends
    try:
        os.setpgid(0, 0)  # its own group: a timeout kills the worker and what it started
    except OSError:
        pass
    while True:
        try:
            index = conn.recv()
        except (EOFError, OSError):
            break
        if index is None:
            break
        conn.send(run(int(index)))
    if on_exit is not None:
        on_exit()
    conn.close()
    exit_now(0)  # skip interpreter teardown: the records are written


class Supervisor:
    """Owns at most one live worker; :meth:`run` runs one point under the time limit."""

    def __init__(self, run: PointFn, timeout_s: float | None, on_exit: Callable[[], None] | None = None) -> None:
        self._run = run
        self._on_exit = on_exit
        self._timeout = timeout_s if timeout_s and timeout_s > 0 else None
        self._ctx = mp.get_context("fork")
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        # not daemonic: a daemonic process may not start children, and a point's DataLoader starts its
        # workers (train.num_workers); the worker still dies with the shard (PR_SET_PDEATHSIG), and a
        # timeout kills its process group, what it started included
        proc = self._ctx.Process(target=_worker_loop, args=(child, self._run, self._on_exit), daemon=False)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        for target in (lambda: os.killpg(proc.pid, signal.SIGKILL), lambda: os.kill(proc.pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        proc.join(10)
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def run(self, index: int) -> Result:
        if self._proc is None or not self._proc.is_alive():
            self._drop()
            self._start()
        assert self._conn is not None and self._proc is not None
        t0 = time.perf_counter()
        try:
            self._conn.send(index)
        except (BrokenPipeError, OSError):
            return self._crashed(5, t0)
        if self._timeout is not None and not self._conn.poll(self._timeout):
            self._kill()
            return Result("timeout", f"timeout after {self._timeout:g} s (shards.point_timeout_s)",
                          time.perf_counter() - t0)
        try:
            status = self._conn.recv()
        except (EOFError, OSError):
            return self._crashed(10, t0)
        return Result(str(status), "", time.perf_counter() - t0)

    def _crashed(self, wait_s: float, t0: float) -> Result:
        """The worker died: how (after up to ``wait_s`` for its exit code)."""
        self._proc.join(wait_s)
        code = self._proc.exitcode
        self._drop()
        return Result("crashed", describe_exit(code), time.perf_counter() - t0)

    def close(self) -> None:
        """Stop the worker (it exits between points)."""
        if self._conn is not None and self._proc is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(10)
            if self._proc.is_alive():
                self._kill()
        self._drop()
