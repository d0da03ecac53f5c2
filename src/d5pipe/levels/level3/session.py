"""Rank sessions: launch a shard's ranks once and run all its level-3 points in them.

Starting ranks (torchrun / mpirun / srun, ``import torch`` in every rank, the process group's
rendezvous) costs seconds; a point's timed steps often cost less. A :class:`RankSession` is one
launch of ``python -m d5pipe.levels.level3.worker --session DIR``. For point *k* the parent
writes ``DIR/point-<k>.json`` (atomically); every rank runs it -- fresh model, seeds and data
slice from that spec, exactly as a one-point launch would -- and writes its result (or its error)
into the point's own output directory, then waits for point *k+1* or ``DIR/stop``.

A launch whose ranks die before they finish the first point (a crash while the process group or
MPI wires up, seen with Open MPI over TCP between network namespaces) is retried once
(:data:`LAUNCH_ATTEMPTS`); the point's record says so (``extra.launch.launch_retries``).

A failing point fails alone: when every rank raises, each writes ``rank<r>.error.json`` and the
session goes on; when the ranks stop answering (one rank raised inside a collective and the
others wait, or a rank died), the parent kills the session's process group after
``distributed.timeout_s`` and the next point starts a new one. Sessions are kept per launch key
(backend, ranks, nodes, launcher, threads...) in the shard worker's cache and closed when the
shard ends.

Every local launch (torchrun, mpirun) gets a temporary directory of its own as ``TMPDIR``
(:func:`launch_tmp`), removed once the launcher has ended, killed or not. The launchers leave files
in the temporary directory: torchrun a ``torchelastic_*`` directory per launch, even when it ends
normally; a killed mpirun its session directory ``ompi.<pid>``, and a later mpirun that gets the same
process id then fails to start ("The PMIx server's listener thread failed to start": such
directories placed at the next process ids reproduce it; process ids wrap at 32768 by default).
Under srun the ranks run on other nodes, in SLURM's job environment, and keep their ``TMPDIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from d5pipe.core.atomic import write_json
from d5pipe.core.toolchain import kill_group
from d5pipe.levels.level3.launch import LaunchPlan
from d5pipe.levels.level3.placement import BIND_ENV, POLLERS_ENV
from d5pipe.measure.process import die_with_parent

POLL_S = 0.005
CLOSE_WAIT_S = 3.0
"""How long closing ranks may take to finalise before they are killed (nothing is measured then)."""
LAUNCH_ATTEMPTS = 2
"""Launches of a session whose ranks die before finishing their first point (then: the point fails)."""
LOG_TAIL_CHARS = 3000
LAUNCH_TMP_PREFIX = "d5pipe-ranks-"
INHERITED_RANK_VARS = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                 BIND_ENV, POLLERS_ENV})


def tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def launch_tmp(plan: LaunchPlan) -> Path | None:
    """A new temporary directory for one launch of ``plan`` (None under srun: see the module docstring)."""
    return None if plan.launcher == "srun" else Path(tempfile.mkdtemp(prefix=LAUNCH_TMP_PREFIX))


def start_ranks(plan: LaunchPlan, cwd: Path, log: IO[bytes], tmp: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``plan``'s launcher in its own session (killed as a group) that dies with this process;
    ``tmp`` (:func:`launch_tmp`) is its and its ranks' ``TMPDIR``."""
    # rank variables (and the binding) of an enclosing launch must not leak into the workers
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_RANK_VARS}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.Popen(plan.argv, cwd=cwd, env={**env, **plan.env}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent)


def run_once(plan: LaunchPlan, cwd: Path, log_path: Path, timeout_s: float) -> None:
    """One launch for one point (``distributed.reuse_ranks: false``): run the launcher to its end;
    on timeout kill its whole process group. Its temporary directory goes with it."""
    tmp = launch_tmp(plan)
    try:
        with open(log_path, "wb") as log:
            proc = start_ranks(plan, cwd, log, tmp)
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise RuntimeError(f"{plan.launcher} exceeded distributed.timeout_s={timeout_s}: "
                                   f"{tail(log_path)}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        raise RuntimeError(f"{plan.launcher} exited with {rc}: {tail(log_path)}")


class LaunchDied(RuntimeError):
    """The ranks died before they finished the first point of their session (a crash while the
    process group or MPI wires up): nothing was measured, so the launch may be retried."""


class RankSession:
    """One launch of the ranks, running points one after another (see module docstring)."""

    def __init__(self, plan: LaunchPlan, root: Path, ranks: int) -> None:
        self.plan, self.root, self.ranks = plan, root, ranks
        self.log = root / "launch.log"
        self.next_index = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp: Path | None = None
        """This launch's ``TMPDIR`` (:func:`launch_tmp`), removed with its ranks."""
        self.started = 0.0
        self.launch_s: float | None = None
        """Seconds from starting the launcher to the ranks' process group being up (the worker's
        ``ready.json``); part of the first point's duration, not of its work."""

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob("point-*.json"):
            stale.unlink()
        (self.root / "stop").unlink(missing_ok=True)
        (self.root / "ready.json").unlink(missing_ok=True)
        self.started, self.launch_s = time.monotonic(), None
        self.kill()  # a launch before this one, and its temporary directory
        self.tmp = launch_tmp(self.plan)
        with open(self.log, "ab") as log:
            self.proc = start_ranks(self.plan, self.root, log, self.tmp)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """End the launch (its whole process group) and remove its temporary directory."""
        if self.proc is not None:
            kill_group(self.proc)
            self.proc = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def close(self) -> None:
        """Ask the ranks to stop; kill them if they do not within :data:`CLOSE_WAIT_S`."""
        if self.alive():
            assert self.proc is not None
            (self.root / "stop").write_text("stop\n")
            try:
                self.proc.wait(CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def run(self, spec: dict[str, Any], out_dir: Path, timeout_s: float) -> list[dict[str, Any]]:
        """Run one point's spec on every rank; the ranks' results in rank order."""
        if not self.alive():
            raise RuntimeError(f"{self.plan.launcher} session is not running: {tail(self.log)}")
        index = self.next_index
        self.next_index += 1
        write_json(self.root / f"point-{index}.json", spec)
        deadline = time.monotonic() + timeout_s
        results = [out_dir / f"rank{r}.json" for r in range(self.ranks)]
        errors = [out_dir / f"rank{r}.error.json" for r in range(self.ranks)]
        while True:
            if self.launch_s is None and (self.root / "ready.json").exists():
                self.launch_s = time.monotonic() - self.started
            done = [p.exists() or e.exists() for p, e in zip(results, errors, strict=True)]
            if all(done):
                break
            if not self.alive():
                rc = self.proc.returncode if self.proc is not None else None
                self.kill()
                died = LaunchDied if index == 0 and not any(p.exists() for p in results) else RuntimeError
                raise died(f"{self.plan.launcher} exited with {rc}: {tail(self.log)}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.plan.launcher} ranks exceeded distributed.timeout_s={timeout_s:g} "
                                   f"(ranks {[r for r, d in enumerate(done) if not d]} did not finish): "
                                   f"{tail(self.log)}")
            time.sleep(POLL_S)
        failed = [json.loads(e.read_text(encoding="utf-8")) for e in errors if e.exists()]
        if failed:
            raise RuntimeError(f"rank {failed[0].get('rank')} of {self.ranks} raised "
                               f"{failed[0].get('error', '?')} ({len(failed)} rank(s) failed)")
        return [json.loads(p.read_text(encoding="utf-8")) for p in results]


def session_for(cache: dict[str, Any], key: str, make: Any) -> RankSession:
    """The live session of ``key`` in a shard's ``cache``, or a new one from ``make()``.

    At most one session lives at a time: another key's session is closed first, since its ranks
    hold the cores (and, under SLURM, the job's CPUs: a second srun step would wait for them).
    The last one is closed by :func:`close_sessions` when the shard worker ends.
    """
    sessions: dict[str, RankSession] = cache.setdefault("level3_sessions", {})
    session = sessions.get(key)
    if session is None or not session.alive():
        for other in list(sessions):
            sessions.pop(other).close()
        session = make()
        session.start()
        sessions[key] = session
    return session


def close_sessions(cache: dict[str, Any]) -> None:
    for session in cache.pop("level3_sessions", {}).values():
        session.close()
