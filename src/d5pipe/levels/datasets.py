"""Datasets for levels 1-3: materialised once per distinct config as a ``.npz``, loaded as tensors.

* :func:`dataset_key` names a dataset config: ``<name>-<16 hex>`` from the canonical JSON of the
  keys that shape the data (e.g. ``n_samples`` does not change ``digits``).
* :func:`prepare` builds the seeded, stratified train/test split and writes it atomically. The
  metadata (stored inside the file) carries ``checksum``: sha256 over the arrays' names, dtypes,
  shapes and bytes, so the same config gives the same checksum on every machine. A second call
  finds a valid file (same key, matching checksum) and returns its metadata without rebuilding.
* :func:`load` reads the file back (verifying the checksum) as a :class:`Dataset`.

Sources, none downloaded: scikit-learn's bundled ``digits`` (8x8 images, stored as (1, 8, 8)),
``breast_cancer`` and ``wine`` (tabular, standardised with train-split statistics), and
``synthetic`` (seeded Gaussian clusters around class prototypes, flat or (C, H, W)). These are
the registered target :func:`builtin_arrays`; a user dataset (``dataset.custom``) is any factory
whose result :func:`materialise` accepts: ``(x_train, y_train, x_test, y_test)`` (tensors or
arrays), a mapping with those keys (and optionally ``n_classes``), or a pair
``(train, test)`` of ``torch.utils.data.Dataset`` (optionally a third item: the collate function;
default ``torch.utils.data.default_collate``), stacked once. The data decide the input shape
(``x_train.shape[1:]``) and the number of classes (``n_classes``, else the largest label + 1).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe import D5PipeError
from d5pipe.levels.dataset_key import (
    DATASET_FORMAT_VERSION,
    SKLEARN_LOADERS,
    canonical_config,
    dataset_key,
    resolve,
)
from d5pipe.levels.schema import DatasetConf
from d5pipe.rundir.atomic import write_bytes

ARRAY_NAMES: tuple[str, ...] = ("x_train", "y_train", "x_test", "y_test")


@dataclass
class Dataset:
    """A prepared dataset as tensors: features float32, labels int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    input_shape: tuple[int, ...]
    """Shape of one sample: (C, H, W) for images, (F,) for vectors."""
    n_classes: int
    meta: dict[str, Any]


def _stratified_split(
    x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per class, a seeded permutation; the first ``round(test_fraction * n_c)`` go to test."""
    rng = np.random.default_rng(seed)
    test_idx: list[np.ndarray] = []
    train_idx: list[np.ndarray] = []
    for cls in np.unique(y):
        idx = np.flatnonzero(y == cls)
        idx = idx[rng.permutation(idx.size)]
        n_test = int(round(test_fraction * idx.size))
        n_test = min(max(n_test, 1), idx.size - 1) if idx.size > 1 else 0
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr = np.sort(np.concatenate(train_idx))
    te = np.sort(np.concatenate(test_idx))
    return x[tr], y[tr], x[te], y[te]


def _load_sklearn(name: str) -> tuple[np.ndarray, np.ndarray]:
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, SKLEARN_LOADERS[name])()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    if name == "digits":
        x = (x / 16.0).reshape(-1, 1, 8, 8)
    return x, y


def _synthetic(conf: DatasetConf) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters around per-class prototypes; image prototypes are spatially smooth."""
    rng = np.random.default_rng(conf.generator_seed)
    shape = tuple(conf.image_shape) if conf.image_shape else (conf.n_features,)
    if len(shape) == 3:
        c, h, w = shape
        coarse = rng.normal(size=(conf.n_classes, c, (h + 1) // 2, (w + 1) // 2))
        protos = coarse.repeat(2, axis=2).repeat(2, axis=3)[:, :, :h, :w]
    else:
        protos = rng.normal(size=(conf.n_classes, *shape))
    y = np.arange(conf.n_samples, dtype=np.int64) % conf.n_classes
    y = y[rng.permutation(conf.n_samples)]
    x = protos[y] + conf.noise * rng.normal(size=(conf.n_samples, *shape))
    return x, y


def builtin_arrays(**section: Any) -> dict[str, np.ndarray]:
    """The registered target of the built-in datasets: their arrays from a ``dataset`` section."""
    return _build_arrays(DatasetConf(**section))


def _build_arrays(conf: DatasetConf) -> dict[str, np.ndarray]:
    if conf.name == "synthetic":
        x, y = _synthetic(conf)
    else:
        x, y = _load_sklearn(conf.name)
    x_tr, y_tr, x_te, y_te = _stratified_split(x, y, conf.test_fraction, conf.split_seed)
    if conf.name in ("breast_cancer", "wine"):
        mean = x_tr.mean(axis=0)
        std = x_tr.std(axis=0)
        std[std == 0] = 1.0
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    return {
        "x_train": np.ascontiguousarray(x_tr, dtype=np.float32),
        "y_train": np.ascontiguousarray(y_tr, dtype=np.int64),
        "x_test": np.ascontiguousarray(x_te, dtype=np.float32),
        "y_test": np.ascontiguousarray(y_te, dtype=np.int64),
    }


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
        missing = [n for n in ARRAY_NAMES if n not in data]
        if missing:
            raise D5PipeError(f"{key}: the dataset mapping lacks {missing}")
        declared = int(data["n_classes"]) if data.get("n_classes") is not None else None
        parts = [data[n] for n in ARRAY_NAMES]
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
    arrays = {n: _as_array(v, key, n) for n, v in zip(ARRAY_NAMES, parts)}
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
           for n in ARRAY_NAMES}
    return out, declared


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and bytes (in :data:`ARRAY_NAMES` order)."""
    h = hashlib.sha256()
    for name in ARRAY_NAMES:
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{arr.dtype.str}|{list(arr.shape)}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: np.array(npz[name]) for name in ARRAY_NAMES}
        meta: dict[str, Any] = json.loads(str(npz["meta_json"]))
    return arrays, meta


def _valid_existing(path: Path, key: str) -> dict[str, Any] | None:
    """The stored metadata when ``path`` holds dataset ``key`` with a matching checksum."""
    if not path.is_file():
        return None
    try:
        arrays, meta = _read_npz(path)
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None
    if meta.get("key") != key or meta.get("checksum") != arrays_checksum(arrays):
        return None
    return meta


def prepare(dataset_cfg: dict[str, Any], out_path: Path) -> dict[str, Any]:
    """Materialise the dataset at ``out_path`` (atomic) unless a valid copy is there; its metadata."""
    out_path = Path(out_path)
    key = dataset_key(dataset_cfg)
    existing = _valid_existing(out_path, key)
    if existing is not None:
        return existing
    import dataclasses

    from d5pipe.levels.plugins import build
    from d5pipe.levels.targets import target_of

    conf = resolve(dataset_cfg)
    tkey, target = target_of(dataclasses.asdict(conf), "dataset")
    arrays, declared = materialise(build(target, tkey), tkey)
    labels = int(max(arrays["y_train"].max(), arrays["y_test"].max()) + 1)
    if declared is not None and declared < labels:
        raise D5PipeError(f"{tkey}: n_classes={declared} but the labels go up to {labels - 1}")
    meta: dict[str, Any] = {
        "schema_version": DATASET_FORMAT_VERSION,
        "key": key,
        "config": canonical_config(dataset_cfg),
        "checksum": arrays_checksum(arrays),
        "input_shape": list(arrays["x_train"].shape[1:]),
        "n_classes": declared if declared is not None else labels,
        "n_train": int(arrays["y_train"].shape[0]),
        "n_test": int(arrays["y_test"].shape[0]),
    }
    buf = io.BytesIO()
    payload: dict[str, Any] = {"meta_json": np.array(json.dumps(meta, sort_keys=True)), **arrays}
    np.savez(buf, **payload)
    write_bytes(out_path, buf.getvalue())
    return meta


def load(path: Path) -> Dataset:
    """Read a prepared dataset; a missing or corrupt file is a D5PipeError naming it."""
    path = Path(path)
    try:
        arrays, meta = _read_npz(path)
    except FileNotFoundError as exc:
        raise D5PipeError(f"dataset file {path} does not exist (run prepare first)") from exc
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise D5PipeError(f"dataset file {path} is not a d5pipe dataset: {exc}") from exc
    if meta.get("checksum") != arrays_checksum(arrays):
        raise D5PipeError(f"dataset file {path}: checksum mismatch (file corrupt or modified)")
    return Dataset(
        x_train=torch.from_numpy(arrays["x_train"]),
        y_train=torch.from_numpy(arrays["y_train"]),
        x_test=torch.from_numpy(arrays["x_test"]),
        y_test=torch.from_numpy(arrays["y_test"]),
        input_shape=tuple(int(d) for d in meta["input_shape"]),
        n_classes=int(meta["n_classes"]),
        meta=meta,
    )


def ensure(dataset_cfg: dict[str, Any], data_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The prepared file for ``dataset_cfg`` under ``data_dir`` (prepared here if missing)."""
    path = Path(data_dir) / f"{dataset_key(dataset_cfg)}.npz"
    meta = prepare(dataset_cfg, path)
    return path, meta


def load_for(dataset_cfg: dict[str, Any], data_dir: Path) -> Dataset:
    """:func:`ensure` then :func:`load`: what a stage runner calls."""
    path, _ = ensure(dataset_cfg, data_dir)
    return load(path)
