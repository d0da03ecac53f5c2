"""A user's torch Datasets kept as they are (``dataset.storage: lazy``): never stacked, read through
their own ``__getitem__`` one sample at a time by the training loop's DataLoader.

A custom dataset (``dataset.custom``) whose factory returns ``(train, test)`` torch Datasets is
stacked into arrays once by default (d5pipe.levels.datasets.materialise). With ``storage: lazy`` the
prepare_data job instead reads every item once to describe the data -- sizes, sample shape, classes,
and ``checksum``, a sha256 over every item -- and keeps only that metadata; a point calls the factory
again and finds its first items unchanged (``head_checksum``) before it trains. Items are ``(x, y)``:
``x`` becomes a float32 tensor and ``y`` an int64 class index, as stacking would make them, so a
lazy dataset trains exactly as its stacked form does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from d5pipe.core.errors import D5PipeError

HEAD_ITEMS = 4
"""Items of each split whose bytes ``head_checksum`` covers (checked at every load)."""


def item(dataset: Any, i: int, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Item ``i`` as (float32 sample, int64 label)."""
    got = dataset[int(i)]
    if not isinstance(got, (tuple, list)) or len(got) < 2:
        raise D5PipeError(f"{key}: item {i} is {type(got).__name__}, not (x, y) (storage: lazy reads (x, y) items)")
    x = torch.as_tensor(got[0], dtype=torch.float32)
    y = torch.as_tensor(got[1], dtype=torch.int64).reshape(())
    return x, y


def _digest(dataset: Any, indices: Iterable[int], key: str) -> tuple[str, list[int], tuple[int, ...]]:
    h = hashlib.sha256()
    labels: list[int] = []
    shape: tuple[int, ...] = ()
    for i in indices:
        x, y = item(dataset, i, key)
        shape = tuple(x.shape)
        h.update(f"{list(x.shape)}|".encode())
        h.update(x.numpy().tobytes())
        labels.append(int(y))
    h.update(np.asarray(labels, dtype=np.int64).tobytes())
    return h.hexdigest(), labels, shape


def describe(train: Any, test: Any, key: str) -> dict[str, Any]:
    """What the prepare job keeps of a lazy dataset (one pass over every item)."""
    if len(train) == 0 or len(test) == 0:
        raise D5PipeError(f"{key}: the train and test Datasets need at least one item each")
    full_tr, y_tr, shape = _digest(train, range(len(train)), key)
    full_te, y_te, shape_te = _digest(test, range(len(test)), key)
    if shape != shape_te:
        raise D5PipeError(f"{key}: train samples {list(shape)} and test samples {list(shape_te)} differ in shape")
    if min(y_tr + y_te) < 0:
        raise D5PipeError(f"{key}: labels must be class indices 0, 1, ...")
    return {"lazy": True, "checksum": hashlib.sha256((full_tr + full_te).encode()).hexdigest(),
            "head_checksum": head_checksum(train, test, key), "input_shape": list(shape),
            "n_classes": max(y_tr + y_te) + 1, "n_train": len(train), "n_test": len(test)}


def head_checksum(train: Any, test: Any, key: str) -> str:
    """sha256 over the first :data:`HEAD_ITEMS` items of each split."""
    parts = [_digest(ds, range(min(HEAD_ITEMS, len(ds))), key)[0] for ds in (train, test)]
    return hashlib.sha256("".join(parts).encode()).hexdigest()


@dataclass
class DatasetSource:
    """A user's Dataset read by index like a generator of d5pipe.levels.lazy_samples."""

    dataset: Any
    sample_shape: tuple[int, ...]
    key: str
    name: str = "user"
    per_sample: bool = True

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def item(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return item(self.dataset, i, self.key)

    def samples(self, idx: np.ndarray) -> np.ndarray:
        if len(idx) == 0:
            return np.empty((0, *self.sample_shape), dtype=np.float32)
        return np.stack([self.item(int(i))[0].numpy() for i in idx])

    def labels(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray([int(self.item(int(i))[1]) for i in idx], dtype=np.int64)
