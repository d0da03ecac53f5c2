"""Two processes that take turns: the measurement side of ``d5pipe ab`` (interleaved A/B).

This machine's speed drifts in states that last seconds (benchmarks/bench_compare_power.py; the
README's "Comparing runs"): two processes measured one after the other see different states, two
measured block by block in turn see the same ones. So ``d5pipe ab`` runs the shard jobs of its two
sides at the same time, paired by stage and shard, and the pair takes turns through a
:class:`Baton`: a process works only while it holds the baton, and hands it over after every timed
block of the shared timer (:func:`yield_turn`, called by d5pipe.measure.timer). Nothing of one
side runs while the other times a block, and both sides' blocks alternate in time (Abedi &
Brecht's randomized multiple interleaved trials at the finest grain the timer has; who starts is
drawn from the pair's seed).

Both sides also run on the same CPUs (:func:`share_cpus`: the lowest ones they may use, as many as
their threads): two processes alive at once are otherwise placed on different cores, and a core's
own state (another tenant on its sibling, its clock) would then favour one side for the whole
pair of jobs.

A job outside ``d5pipe ab`` has no baton (``D5PIPE_LOCKSTEP`` unset) and every call here is a
no-op. A partner that does not arrive within ``D5PIPE_LOCKSTEP_WAIT_S`` (default 120 s), leaves
(its shard ended) or dies (its socket closes) leaves the other to run alone; a job whose level
never calls the timer (levels 2 and 3 time their own steps) keeps the baton for its whole shard,
so the pair then runs one after the other. The record says which (``extra.lockstep``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

ENV_DIR = "D5PIPE_LOCKSTEP"
"""Directory of the pair's rendezvous sockets (short: a Unix socket path has at most 107 bytes)."""
ENV_SIDE = "D5PIPE_LOCKSTEP_SIDE"
"""``a`` or ``b``."""
ENV_SEED = "D5PIPE_LOCKSTEP_SEED"
ENV_WAIT = "D5PIPE_LOCKSTEP_WAIT_S"
DEFAULT_WAIT_S = 120.0
TURN, LEAVE = b"T", b"X"


@dataclass
class Stats:
    """What a process saw of its partner (into the point records)."""

    paired: bool = False
    turns: int = 0
    waited_s: float = 0.0
    alone_since: str = ""
    cpus: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"paired": self.paired, "turns": self.turns, "waited_s": round(self.waited_s, 3),
                "alone": self.alone_since, "cpus": self.cpus}


class Baton:
    """One process's end of a pair that takes turns (module docstring)."""

    def __init__(self, sock: socket.socket | None, holding: bool) -> None:
        self._sock = sock
        self.holding = holding
        self.stats = Stats(paired=sock is not None)
        if sock is not None and not holding:
            self._wait()

    @property
    def alone(self) -> bool:
        return self._sock is None

    def _drop(self, why: str) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self.holding = True
        self.stats.alone_since = self.stats.alone_since or why

    def _wait(self) -> None:
        assert self._sock is not None
        t0 = time.perf_counter()
        try:
            msg = self._sock.recv(1)
        except OSError:
            msg = b""
        self.stats.waited_s += time.perf_counter() - t0
        if msg == TURN:
            self.holding = True
        else:
            self._drop("partner left" if msg == LEAVE else "partner gone")

    def yield_turn(self) -> None:
        """Hand the baton over and wait for it to come back (no-op alone)."""
        if self._sock is None:
            return
        try:
            self._sock.sendall(TURN)
        except OSError:
            self._drop("partner gone")
            return
        self.holding = False
        self.stats.turns += 1
        self._wait()

    def leave(self) -> None:
        """Tell the partner to go on alone; this process no longer takes turns."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.sendall(LEAVE)
        self._drop("left")


def _first(key: str, seed: str) -> str:
    """Which side starts the pair ``key``: drawn from the seed (randomized order per pair)."""
    return "a" if hashlib.sha256(f"{seed}/{key}".encode()).digest()[0] % 2 == 0 else "b"


def connect(directory: str, side: str, key: str, seed: str = "0", wait_s: float = DEFAULT_WAIT_S) -> Baton:
    """The baton of pair ``key``: side ``a`` listens, side ``b`` connects; alone after ``wait_s``."""
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = os.path.join(directory, f"{name}.sock")
    first = _first(key, seed) == side
    deadline = time.monotonic() + wait_s
    sock: socket.socket | None = None
    if side == "a":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            srv.bind(path)
            srv.listen(1)
            srv.settimeout(max(0.0, deadline - time.monotonic()))
            sock, _ = srv.accept()
        except OSError:
            sock = None
        finally:
            srv.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    else:
        while time.monotonic() < deadline:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                sock = s
                break
            except OSError:
                s.close()
                time.sleep(0.05)
    if sock is not None:
        sock.settimeout(None)
    baton = Baton(sock, holding=first or sock is None)
    if sock is None:
        baton.stats.alone_since = f"no partner within {wait_s:g} s"
    return baton


_CURRENT: Baton | None = None


def share_cpus() -> list[int]:
    """Pin this process (and what it starts later) to the lowest CPUs it may use, as many as its
    threads (``OMP_NUM_THREADS``): the other side does the same, so both run on the same cores."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
        threads = max(1, int(os.environ.get("OMP_NUM_THREADS") or 1))
        chosen = allowed[:threads]
        os.sched_setaffinity(0, chosen)
        return chosen
    except (AttributeError, OSError, ValueError):  # not Linux, or not allowed: the pair still takes turns
        return []


def begin(key: str, pin: bool = True) -> Baton | None:
    """Join the pair ``key`` when this job runs under ``d5pipe ab`` (else None); returns holding
    the baton, on the CPUs both sides share (``pin``; not for jobs that start ranks of their own,
    which need every core)."""
    global _CURRENT
    directory = os.environ.get(ENV_DIR)
    side = os.environ.get(ENV_SIDE, "")
    if not directory or side not in ("a", "b"):
        return None
    cpus = share_cpus() if pin else []
    if _CURRENT is not None:
        _CURRENT.leave()
    wait = float(os.environ.get(ENV_WAIT) or DEFAULT_WAIT_S)
    _CURRENT = connect(directory, side, key, os.environ.get(ENV_SEED, "0"), wait)
    _CURRENT.stats.cpus = cpus
    return _CURRENT


def yield_turn() -> None:
    """Called by the timer after each timed block: the partner times one now (no-op without one)."""
    if _CURRENT is not None:
        _CURRENT.yield_turn()


def end() -> None:
    """This job's measurements are over: the partner goes on alone."""
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.leave()
        _CURRENT = None


def stats() -> dict[str, object] | None:
    """What this process saw of its partner so far (None outside ``d5pipe ab``)."""
    return None if _CURRENT is None else _CURRENT.stats.to_dict()


@contextlib.contextmanager
def paired(key: str) -> Iterator[Baton | None]:
    """``begin(key)`` ... ``end()``."""
    baton = begin(key)
    try:
        yield baton
    finally:
        end()
