"""Atomic file writes: temp file in the same directory, rename; files honour the umask. Every
temp-file-and-rename write of d5pipe goes through :func:`replacing` (or :func:`write_bytes` on it).

``os.replace`` makes a write atomic against a killed process: a reader sees the old file or the
new one, never half. A full disk (ENOSPC, EDQUOT) removes the temp file and raises
d5pipe.core.errors.DiskFull naming ``path`` and the free space (exit 75). ``durable=True`` (the
default) also fsyncs, so the file survives a machine crash; point records are written with ``durable=False`` and synced in one batch when their shard
finishes (d5pipe.execute.shard), which keeps a trivial point's cost far below a millisecond.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from d5pipe.core.errors import DiskFull, is_disk_full


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_current_umask()
"""What ``open()`` would create: mkstemp's 0600 would hide reports from colleagues."""


_TEMP_SUFFIX = ".tmp"


def _temp_prefix(name: str) -> str:
    return f".{name}."


def is_temp_of(name: str, candidate: str) -> bool:
    """Whether ``candidate`` is a temp file :func:`write_bytes` made for a file called ``name``
    (one a killed process left behind; a live writer's is renamed or removed at once)."""
    return candidate.startswith(_temp_prefix(name)) and candidate.endswith(_TEMP_SUFFIX)


@contextmanager
def replacing(path: Path, durable: bool = True, created: bool = True) -> Iterator[Path]:
    """A temp file beside ``path`` for the block to fill, renamed over ``path`` when the block ends
    (fsynced first when ``durable``) and removed when it raises; a kill leaves the old file or the
    new one, never half. ``created=False`` gives a free name instead, for writers that must create
    the file themselves (``os.link``). A created temp file has the mode ``open()`` would give."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=_TEMP_SUFFIX, dir=path.parent)
    except OSError as err:
        if is_disk_full(err):
            raise DiskFull.at(path) from err
        raise
    tmp = Path(name)
    try:
        try:
            if created:
                os.fchmod(fd, _MODE)
        finally:
            os.close(fd)
        if not created:
            tmp.unlink()
        yield tmp
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if is_disk_full(err):  # the old file is untouched: one line naming the path, exit 75
            raise DiskFull.at(path) from err
        raise


def write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that a kill leaves the old file or the new one, never half."""
    with replacing(path, durable) as tmp:
        tmp.write_bytes(data)


def _fsync(path: Path) -> None:
    """fsync the file or directory at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(paths: Iterable[Path]) -> None:
    """fsync files written with ``durable=False`` and their directories (once each)."""
    dirs: set[Path] = set()
    for p in paths:
        try:
            _fsync(p)
        except FileNotFoundError:
            continue
        dirs.add(Path(p).parent)
    for d in dirs:
        _fsync(d)


def write_text(path: Path, text: str, durable: bool = True) -> None:
    write_bytes(path, text.encode("utf-8"), durable)


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in ``path``; ``default`` when the file is missing, unreadable or not JSON (a cache, a
    marker: whatever wrote it may have died first)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write atomically only when the content differs; keeps mtimes stable for Snakemake."""
    path = Path(path)
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_bytes(path, data)
    return True


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in chunks by hashlib (bundles, the dataset cache, ONNX files)."""
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
