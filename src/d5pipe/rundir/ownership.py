"""Who may write a run directory: its owning experiment, the live driver's lock, stale locks.

* :func:`check_out_dir` — ``--out`` must be a directory we can create and write (one line, exit 2,
  for a file, a read-only place or an unwritable parent; never a traceback).
* :func:`claim` — ``RUN/.d5pipe-owner.json`` records the experiment that owns the directory; a
  different experiment, or a non-empty directory that is not a d5pipe run, is refused unless
  ``force`` (the temp file of an owner record whose writer was killed does not count: it is
  removed).
* :class:`RunLock` — the driver holds an exclusive ``flock`` on ``RUN/.d5pipe.lock`` while it
  runs. The kernel drops it when the driver dies by any signal, so a held lock always means a
  live run (its PID is in the file) and a free one means any Snakemake lock left in
  ``RUN/.snakemake/locks`` is stale: :func:`clear_stale_snakemake_locks` removes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from d5pipe.core.atomic import is_temp_of, read_json, write_json
from d5pipe.core.errors import D5PipeError
from d5pipe.rundir.layout import RunDir

OWNER_FILE = ".d5pipe-owner.json"
LOCK_FILE = ".d5pipe.lock"


def check_out_dir(path: Path) -> None:
    """``path`` is, or can become, a writable directory (else a one-line D5PipeError)."""
    if path.exists() and not path.is_dir():
        raise D5PipeError(f"--out {path}: exists and is not a directory")
    probe = path if path.exists() else next((p for p in path.parents if p.exists()), Path("."))
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise D5PipeError(f"--out {path}: {probe} is not writable")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise D5PipeError(f"--out {path}: cannot create the directory ({exc.strerror})") from None


def claim(rd: RunDir, experiment: str, force: bool = False) -> None:
    """Record ``experiment`` as the owner of ``rd``; refuse another experiment's directory."""
    owner_path = rd.root / OWNER_FILE
    recorded = read_json(owner_path)
    owner = recorded.get("experiment") if isinstance(recorded, dict) else None
    if owner is None and rd.is_run():
        owner = rd.experiment or None  # a run made before ownership was recorded
    if owner is not None and owner != experiment and not force:
        raise D5PipeError(f"--out {rd.root}: belongs to experiment '{owner}', not '{experiment}'; "
                          "use another --out (or --force to take it over)")
    if owner is None and not force:
        others = []
        for p in rd.root.iterdir():
            if is_temp_of(OWNER_FILE, p.name):  # a driver killed while claiming; we hold the lock
                p.unlink(missing_ok=True)
            elif p.name not in (LOCK_FILE, OWNER_FILE):
                others.append(p.name)
        if others:
            raise D5PipeError(f"--out {rd.root}: not empty and not a d5pipe run directory "
                              f"(holds {others[0]!r}); use an empty or new directory (or --force)")
    if owner != experiment:
        write_json(owner_path, {"schema_version": 1, "experiment": experiment})


class RunLock:
    """Exclusive lock of a run directory for the lifetime of one driver (see module docstring)."""

    def __init__(self, rd: RunDir) -> None:
        self.path = rd.root / LOCK_FILE
        self._fd: int | None = None

    def holder(self) -> str:
        info = read_json(self.path)
        if not isinstance(info, dict):
            return "another process"
        return f"PID {info.get('pid')} on {info.get('host')} (since {info.get('started')})"

    def acquire(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise D5PipeError(f"{self.path.parent}: in use by a running d5pipe, {self.holder()}; "
                              "wait for it, or stop it (d5pipe status shows it)") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(info) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def clear_stale_snakemake_locks(rd: RunDir) -> int:
    """Remove Snakemake's locks (call only while holding :class:`RunLock`); how many there were."""
    locks = rd.root / ".snakemake" / "locks"
    stale = list(locks.glob("*")) if locks.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)
