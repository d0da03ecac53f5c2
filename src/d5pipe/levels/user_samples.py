"""A user's torch Datasets kept as they are (``dataset.storage: lazy``): never stacked, read through
their own ``__getitem__`` one sample at a time by the training loop's DataLoader.

A custom dataset (``dataset.custom``) whose factory returns ``(train, test)`` torch Datasets is
stacked into arrays once by default (:func:`materialise`). With ``storage: lazy`` the
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

SPLIT_NAMES: tuple[str, ...] = ("x_train", "y_train", "x_test", "y_test")
"""What a factory's result becomes (d5pipe.levels.datasets.ARRAY_NAMES is this)."""
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
    dtype = torch.float32

    def item(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return item(self.dataset, i, self.key)

    def samples(self, idx: np.ndarray) -> np.ndarray:
        return np.stack([self.item(int(i))[0].numpy() for i in idx])

    def labels(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray([int(self.item(int(i))[1]) for i in idx], dtype=np.int64)


def _as_array(value: Any, key: str, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return np.asarray(value.detach().cpu().numpy())
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise D5PipeError(f"{key}: {what} is not an array ({exc})") from None


def _stack(dataset: Any, collate: Any, key: str, what: str) -> tuple[Any, Any]:
    from torch.utils.data import default_collate

    try:
        items = [dataset[i] for i in range(len(dataset))]
    except TypeError as exc:
        raise D5PipeError(f"{key}: the {what} dataset needs __len__ and __getitem__ ({exc})") from None
    batch = (collate or default_collate)(items)
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise D5PipeError(f"{key}: collating the {what} dataset gave {type(batch).__name__}, not (x, y)")
    return batch[0], batch[1]


def materialise(data: Any, key: str) -> tuple[dict[str, np.ndarray], int | None]:
    """A dataset factory's result as the four arrays (x float32, y int64) and its declared classes."""
    from torch.utils.data import Dataset as TorchDataset

    declared: int | None = None
    if isinstance(data, dict):
        missing = [n for n in SPLIT_NAMES if n not in data]
        if missing:
            raise D5PipeError(f"{key}: the dataset mapping lacks {missing}")
        declared = int(data["n_classes"]) if data.get("n_classes") is not None else None
        parts = [data[n] for n in SPLIT_NAMES]
    elif isinstance(data, (tuple, list)) and len(data) in (2, 3) and isinstance(data[0], TorchDataset):
        collate = data[2] if len(data) == 3 else None
        x_tr, y_tr = _stack(data[0], collate, key, "train")
        x_te, y_te = _stack(data[1], collate, key, "test")
        parts = [x_tr, y_tr, x_te, y_te]
    elif isinstance(data, (tuple, list)) and len(data) == 4:
        parts = list(data)
    else:
        raise D5PipeError(f"{key}: a dataset factory returned {type(data).__name__}; expected "
                          "(x_train, y_train, x_test, y_test), a mapping of those, or (train, test) Datasets")
    arrays = {n: _as_array(v, key, n) for n, v in zip(SPLIT_NAMES, parts)}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim < 2 or y.ndim != 1 or len(x) != len(y) or len(y) == 0:
            raise D5PipeError(f"{key}: {split} split has x {x.shape} and y {y.shape}; need (N, ...) and (N,)")
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise D5PipeError(f"{key}: train samples {arrays['x_train'].shape[1:]} and test samples "
                          f"{arrays['x_test'].shape[1:]} differ in shape")
    for n in ("y_train", "y_test"):
        y = arrays[n]
        if not (np.issubdtype(y.dtype, np.integer) or np.all(np.mod(y, 1) == 0)) or y.min() < 0:
            raise D5PipeError(f"{key}: {n} must hold class indices 0, 1, ...")
    out = {n: np.ascontiguousarray(arrays[n], dtype=np.float32 if n.startswith("x") else np.int64)
           for n in SPLIT_NAMES}
    return out, declared


def user_datasets(data: Any, key: str) -> tuple[Any, Any]:
    """``(train, test)`` torch Datasets of a factory's result (what ``storage: lazy`` keeps)."""
    from torch.utils.data import Dataset as TorchDataset

    if isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(d, TorchDataset) for d in data):
        return data[0], data[1]
    raise D5PipeError(f"{key}: dataset.storage lazy keeps a factory's (train, test) torch Datasets unstacked; "
                      f"it returned {type(data).__name__}" + (" with a collate function (not read lazily)"
                                                              if isinstance(data, (tuple, list)) and len(data) == 3 else ""))
