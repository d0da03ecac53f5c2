"""A training split stored on disk and read one sample at a time (``dataset.storage``: npy, png).

The prepare_data job writes the training samples once, beside the dataset's ``.npz`` (which keeps
the labels, the test split and the metadata):

* ``npy``: ``<key>.x_train.npy``, one NumPy array, read through a memory map;
* ``png``: ``<key>.x_train.png/<index>.png``, one 8-bit PNG a sample (grey for one channel, RGB
  for three), decoded with PIL. A sample ``x`` is stored as ``q = (x - offset) / scale`` for the
  first affine map of :data:`PIXEL_MAPS` under which every training sample is exactly 8-bit
  (digits: ``x = q / 16``; ``pixels: uint8``: ``x = q / 32 - 4``); the map is in the metadata and
  decoding applies it in float32, so every storage gives the same values.

Both write a ``sha256`` over what they wrote (file bytes in index order), which :func:`verify`
recomputes when the dataset is loaded. :class:`StoredSource` reads samples by global index like a
generator of d5pipe.levels.lazy_samples (so a ``LazySamples`` over it indexes like a tensor) and says
``per_sample``: the training loop reads it through a DataLoader, one ``__getitem__`` a sample
(d5pipe.levels.level2.train_loop).
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.core.atomic import file_sha256, replacing, write_bytes
from d5pipe.core.errors import D5PipeError

PIXEL_MAPS: tuple[tuple[float, float], ...] = ((1 / 16, 0.0), (1 / 32, -4.0), (1.0, 0.0), (1 / 255, 0.0))
"""``(scale, offset)`` with ``x = q * scale + offset``, tried in order for ``png``."""
CHUNK = 4096
"""Samples per write when a generated split is stored."""


def side_path(npz: Path, storage: str) -> Path:
    """Where the training samples of the dataset file ``npz`` are stored for ``storage``."""
    return npz.with_name(f"{npz.stem}.x_train.{storage}")


def _decode(data: bytes, scale: float, offset: float) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        q = np.asarray(img)
    q = q[None] if q.ndim == 2 else np.moveaxis(q, -1, 0)
    out: np.ndarray = q.astype(np.float32) * np.float32(scale) + np.float32(offset)
    return out


def _encode(q: np.ndarray) -> bytes:
    from PIL import Image

    img = Image.fromarray(q[0] if q.shape[0] == 1 else np.moveaxis(q, 0, -1), "L" if q.shape[0] == 1 else "RGB")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _pixels(x: np.ndarray, scale: float, offset: float) -> np.ndarray | None:
    """``x`` as 8-bit pixels under ``x = q * scale + offset`` (decoded exactly as :func:`_decode`
    does), or None when some value is not such a pixel."""
    q = np.rint((x.astype(np.float64) - offset) / scale)
    if q.size and (q.min() < 0 or q.max() > 255):
        return None
    if not np.array_equal(q.astype(np.float32) * np.float32(scale) + np.float32(offset), x.astype(np.float32)):
        return None
    return q.astype(np.uint8)


def pixel_map(x: np.ndarray, where: str) -> tuple[float, float]:
    """The first map of :data:`PIXEL_MAPS` under which every value of ``x`` is an exact 8-bit pixel."""
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise D5PipeError(f"{where}: png holds images of 1 or 3 channels; the samples are {list(x.shape[1:])}")
    for scale, offset in PIXEL_MAPS:
        if _pixels(x, scale, offset) is not None:
            return scale, offset
    raise D5PipeError(f"{where}: png holds 8-bit pixels, and the training samples are not 8-bit under any of "
                      f"{[f'q*{s:g}{o:+g}' for s, o in PIXEL_MAPS]} (synthetic images: set dataset.pixels: uint8)")


def write(samples: Any, n: int, storage: str, npz: Path, where: str) -> dict[str, Any]:
    """Store the ``n`` training samples (``samples[a:b]`` gives a float array or tensor) for
    ``storage``; the metadata to keep (file, sha256, the pixel map)."""
    path = side_path(npz, storage)
    digest = hashlib.sha256()
    first = np.asarray(samples[0:1])
    if storage == "npy":
        with replacing(path, durable=False) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=first.dtype, shape=(n, *first.shape[1:]))
            for a in range(0, n, CHUNK):
                out[a:a + CHUNK] = np.asarray(samples[a:a + CHUNK])
            out.flush()
            del out
        return {"storage": storage, "train_file": path.name, "train_sha256": file_sha256(path),
                "train_dtype": str(first.dtype)}
    scale, offset = pixel_map(np.asarray(samples[0:min(n, CHUNK)]), where)
    path.mkdir(parents=True, exist_ok=True)
    for a in range(0, n, CHUNK):
        q = _pixels(np.asarray(samples[a:a + CHUNK]), scale, offset)
        if q is None:
            raise D5PipeError(f"{where}: png holds 8-bit pixels, and training samples {a} to {a + CHUNK - 1} are "
                              f"not 8-bit under q*{scale:g}{offset:+g}, the map of the first ones")
        for i, sample in enumerate(q):
            data = _encode(sample)
            digest.update(data)
            write_bytes(path / f"{a + i}.png", data)
    return {"storage": storage, "train_file": path.name, "train_sha256": digest.hexdigest(),
            "train_dtype": "float32", "pixel_map": [scale, offset]}


def verify(npz: Path, meta: dict[str, Any]) -> None:
    """The stored samples are what the prepare job wrote (sha256); else a D5PipeError naming them."""
    path = npz.with_name(str(meta["train_file"]))
    digest = hashlib.sha256()
    try:
        if meta["storage"] == "npy":
            found = file_sha256(path)
        else:
            for i in range(int(meta["n_train"])):
                digest.update((path / f"{i}.png").read_bytes())
            found = digest.hexdigest()
    except OSError as exc:
        raise D5PipeError(f"dataset {meta.get('key')}: stored samples {path} unreadable ({exc})") from exc
    if found != meta.get("train_sha256"):
        raise D5PipeError(f"dataset {meta.get('key')}: stored samples {path} do not match their checksum")


_MAPS: dict[tuple[int, str], np.ndarray] = {}
"""Open memory maps by (process, file): each process (a DataLoader worker too) maps a file once."""


def _memory_map(path: str) -> np.ndarray:
    key = (os.getpid(), path)
    mm = _MAPS.get(key)
    if mm is None:
        mm = _MAPS[key] = np.load(path, mmap_mode="r")
    return mm


@dataclass
class StoredSource:
    """The training samples of a stored split, read by global index (see the module docstring)."""

    path: str
    storage: str
    sample_shape: tuple[int, ...]
    n: int
    numpy_dtype: str = "float32"
    pixel_scale: float = 1.0
    pixel_offset: float = 0.0
    name: str = "stored"
    per_sample: bool = True

    @property
    def dtype(self) -> torch.dtype:
        return torch.from_numpy(np.empty(0, dtype=self.numpy_dtype)).dtype

    def samples(self, idx: np.ndarray) -> np.ndarray:
        if self.storage == "npy":
            return np.asarray(_memory_map(self.path)[idx])
        return np.stack([_decode(Path(self.path, f"{int(i)}.png").read_bytes(), self.pixel_scale, self.pixel_offset)
                         for i in idx])

    def labels(self, idx: np.ndarray) -> np.ndarray:
        raise TypeError("a stored split holds samples; its labels are in the dataset file")


def source(npz: Path, meta: dict[str, Any]) -> StoredSource:
    """The :class:`StoredSource` of a prepared dataset whose metadata says ``storage``."""
    scale, offset = meta.get("pixel_map") or (1.0, 0.0)
    return StoredSource(str(npz.with_name(str(meta["train_file"]))), str(meta["storage"]),
                        tuple(int(d) for d in meta["input_shape"]), int(meta["n_train"]), str(meta["train_dtype"]),
                        float(scale), float(offset))
