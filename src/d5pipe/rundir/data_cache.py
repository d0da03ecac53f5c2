"""Prepared datasets shared by run directories: a user cache keyed by the dataset key.

A dataset key (d5pipe.levels.dataset_key) names the data exactly: the keys that shape them, the
seeds, the format version and, for user datasets, the hash of their code. The ``prepare_data`` job
stores what it prepared here (:func:`store`); before Snakemake starts, ``d5pipe run`` restores every
dataset of the plan that the cache holds into ``RUN/data/`` (:func:`restore`), so Snakemake finds
it prepared and runs no ``prepare_data`` job. The run still records which data it used:
``RUN/data/<key>.json`` is the preparation's metadata (key, checksum of the arrays) plus
``from_cache`` (the cached file and its sha256, verified on restore).

Where and how much (the machine's business, not an experiment's): ``$D5PIPE_CACHE_DIR/data``
(default ``$XDG_CACHE_HOME/d5pipe/data``, else ``~/.cache/d5pipe/data``), at most
``$D5PIPE_DATA_CACHE_MB`` megabytes (default 2048; 0 turns the cache off), least recently used
evicted first. ``d5pipe cache`` lists it, ``d5pipe cache --clear`` empties it. Torch-free.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import file_sha256, replacing, write_bytes, write_json
from d5pipe.core.errors import D5PipeError

DEFAULT_LIMIT_MB = 2048


def cache_dir() -> Path:
    """``data/`` of the user's d5pipe cache (d5pipe.core.user_dirs.user_cache_dir)."""
    from d5pipe.core.user_dirs import user_cache_dir

    return user_cache_dir() / "data"


def limit_bytes() -> int:
    """``$D5PIPE_DATA_CACHE_MB`` (default 2048) in bytes; 0 turns the cache off."""
    raw = os.environ.get("D5PIPE_DATA_CACHE_MB", str(DEFAULT_LIMIT_MB))
    try:
        mb = float(raw)
    except ValueError:
        raise D5PipeError(f"D5PIPE_DATA_CACHE_MB: {raw!r} is not a number of megabytes") from None
    if mb < 0:
        raise D5PipeError(f"D5PIPE_DATA_CACHE_MB: {raw!r} must be >= 0")
    return int(mb * (1 << 20))


@dataclass(frozen=True)
class Restored:
    key: str
    source: Path
    prepare_s: float
    """How long preparing it took when it was stored (what this restore saved, roughly)."""


def store(key: str, data: Path, meta: dict[str, Any], prepare_s: float) -> None:
    """Keep a freshly prepared dataset (``data``: its ``.npz``; ``meta``: its metadata); then evict
    the least recently used entries beyond the size limit. A failure to cache never fails the job."""
    limit = limit_bytes()
    if limit <= 0 or Path(data).stat().st_size > limit:
        return
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        target = root / f"{key}.npz"
        with replacing(target, durable=False) as tmp:
            shutil.copyfile(data, tmp)
        write_json(root / f"{key}.json", {**meta, "file_sha256": file_sha256(target), "prepare_s": prepare_s})
        evict(limit)
    except OSError:
        return


def restore(key: str, data_dir: Path) -> Restored | None:
    """Put the cached dataset ``key`` into ``data_dir`` (hard link, else copy) with its metadata and
    where it came from; None when the cache does not hold it or its file no longer matches."""
    if limit_bytes() <= 0:
        return None
    root = cache_dir()
    src, src_meta = root / f"{key}.npz", root / f"{key}.json"
    try:
        meta = json.loads(src_meta.read_text())
        if meta.get("key") != key or file_sha256(src) != meta.get("file_sha256"):
            return None  # a damaged or foreign entry: the job prepares the data instead
        data_dir.mkdir(parents=True, exist_ok=True)
        out = data_dir / f"{key}.npz"
        with replacing(out, durable=False, created=False) as tmp:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
        now = time.time()
        os.utime(src, (now, now))  # recently used
    except (OSError, ValueError):
        return None
    prepare_s = float(meta.pop("prepare_s", 0.0) or 0.0)
    sha = meta.pop("file_sha256")
    record = {**meta, "from_cache": {"path": str(src), "file_sha256": sha}}
    write_bytes(data_dir / f"{key}.json", (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return Restored(key, src, prepare_s)


def entries() -> list[tuple[str, int, float]]:
    """(key, bytes, last used) of every cached dataset, most recently used first."""
    root = cache_dir()
    out = []
    for npz in root.glob("*.npz") if root.is_dir() else ():
        try:
            st = npz.stat()
        except OSError:
            continue
        out.append((npz.stem, st.st_size, st.st_mtime))
    return sorted(out, key=lambda e: -e[2])


def evict(limit: int) -> list[str]:
    """Remove least recently used entries until the cache holds at most ``limit`` bytes."""
    removed = []
    kept = 0
    for key, size, _used in entries():
        if kept + size <= limit:
            kept += size
            continue
        for suffix in (".npz", ".json"):
            (cache_dir() / f"{key}{suffix}").unlink(missing_ok=True)
        removed.append(key)
    return removed


def clear() -> int:
    """Empty the cache; the number of datasets removed."""
    n = len(entries())
    root = cache_dir()
    if root.is_dir():
        shutil.rmtree(root)
    return n
