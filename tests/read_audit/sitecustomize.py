"""Logs every file a Python process opens for reading under ``$D5PIPE_READ_AUDIT_ROOT``, one line
per open (``pid<TAB>path``) appended to ``$D5PIPE_READ_AUDIT_LOG``: put this folder on
``PYTHONPATH`` and every d5pipe process -- the driver, Snakemake, the shard jobs -- reports its
reads (tests/test_reads_once.py). Lines are written at once: jobs end with ``os._exit``."""

from __future__ import annotations

import os
import sys
import threading

_ROOT = os.environ.get("D5PIPE_READ_AUDIT_ROOT", "")
_LOG = os.environ.get("D5PIPE_READ_AUDIT_LOG", "")
_busy = threading.local()


def _reading(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return not any(c in mode for c in "wax+")
    if isinstance(flags, int):
        return flags & (os.O_WRONLY | os.O_RDWR) == 0
    return False


def _callers() -> str:
    """The innermost frames of d5pipe and Snakemake that led to the open (``d5pipe/rundir/layout.py:172:_parse
    < ...``): the test tells d5pipe's reads from Snakemake's by the first one."""
    names = []
    frame = sys._getframe(0)
    while frame is not None and len(names) < 4:
        file = frame.f_code.co_filename.replace(os.sep, "/")
        for package in ("/d5pipe/", "/snakemake/"):
            if package in file:
                names.append(f"{package[1:]}{file.rsplit(package, 1)[1]}:{frame.f_lineno}:{frame.f_code.co_name}")
                break
        frame = frame.f_back
    return " < ".join(names)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or getattr(_busy, "on", False):
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if not isinstance(path, str | bytes | os.PathLike) or not _reading(mode, flags):
        return
    _busy.on = True
    try:  # never fail the open (the interpreter opening its script runs with no Python frame)
        full = os.path.abspath(os.fsdecode(path))
        if full.startswith(_ROOT + os.sep) and os.path.isfile(full):
            fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()}\t{full}\t{_callers()}\n".encode())
            finally:
                os.close(fd)
    except Exception:  # noqa: BLE001 - a test probe
        pass
    finally:
        _busy.on = False


if _ROOT and _LOG:
    sys.addaudithook(_hook)
