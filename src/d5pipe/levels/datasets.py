"""Datasets for levels 1-3: materialised once per distinct config as a ``.npz``, loaded as tensors
-- or, for the generated datasets, described by a small metadata file and generated on demand.

* :func:`dataset_key` names a dataset config: ``<name>-<16 hex>`` from the canonical JSON of the
  keys that shape the data (e.g. ``n_samples`` does not change ``digits``).
* :func:`prepare` builds the seeded, stratified train/test split and writes it atomically. The
  metadata (stored inside the file) carries ``checksum``: sha256 over the arrays' names, dtypes,
  shapes and bytes, so the same config gives the same checksum on every machine. A second call
  finds a valid file (same key, matching checksum) and returns its metadata without rebuilding.
* :func:`load` reads the file back (verifying the checksum) as a :class:`Dataset`.

Generated datasets, ``synthetic_images`` (``[C, H, W]`` float32, e.g. ImageNet-shaped) and
``synthetic_tokens`` (``seq_len`` int64 token ids below ``vocab_size``), are never materialised:
sample ``i`` and its label are a pure function of ``generator_seed``, ``i`` and the shaping keys
(d5pipe.levels.lazy_samples), so ``n_samples`` may be 1_000_000 of 600 KB each. Their file holds
only the metadata (key, config, ``input_shape``, ``dtype``, ``n_samples``, ``n_classes``, the split
sizes, ``"generated": true``) and ``checksum``: sha256 over the canonical config (with the format
and generator versions) and the bytes of the first samples and labels of each split, which
:func:`load` recomputes, so a changed generator is detected. Their :class:`Dataset` holds a
:class:`~d5pipe.levels.lazy_samples.LazySamples` for each of ``x_train``, ``y_train``,
``x_test``, ``y_test``: ``len``, ``shape``, ``dtype`` and indexing with an int, a slice or a 1-D
index tensor/array give real tensors. Code that needs whole tensors calls
:func:`require_materialised` (a ``PointSkipped`` naming the dataset for a generated one).

Sources, none downloaded: scikit-learn's bundled ``digits`` (8x8 images, stored as (1, 8, 8)),
``breast_cancer`` and ``wine`` (tabular, standardised with train-split statistics), and
``synthetic`` (seeded Gaussian clusters around class prototypes, flat or (C, H, W)). These are
the registered target ``d5pipe.levels.builtin_datasets.builtin_arrays``; a user dataset (``dataset.custom``) is any factory
whose result :func:`materialise` accepts: ``(x_train, y_train, x_test, y_test)`` (tensors or
arrays), a mapping with those keys (and optionally ``n_classes``), or a pair
``(train, test)`` of ``torch.utils.data.Dataset`` (optionally a third item: the collate function;
default ``torch.utils.data.default_collate``), stacked once. The data decide the input shape
(``x_train.shape[1:]``) and the number of classes (``n_classes``, else the largest label + 1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.core.atomic import write_bytes
from d5pipe.core.canonical import canonical_json
from d5pipe.core.errors import D5PipeError
from d5pipe.levels import stored_samples, user_samples
from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.dataset_key import (
    DATASET_FORMAT_VERSION,
    canonical_config,
    dataset_key,
    is_lazy,
    resolve,
)
from d5pipe.levels.instantiate import build
from d5pipe.levels.lazy_samples import Generator, LazySamples, lazy_splits
from d5pipe.levels.targets import target_of

ARRAY_NAMES: tuple[str, ...] = user_samples.SPLIT_NAMES
CHECKSUM_SAMPLES = 4
"""A generated dataset's checksum covers the first this many samples and labels of each split."""

Samples = torch.Tensor | LazySamples
"""One split's samples or labels: a tensor, or generated on demand (a generated dataset)."""


@dataclass
class Dataset:
    """A prepared dataset as tensors (features float32, labels int64), or, for a generated dataset,
    as :class:`LazySamples` (samples float32 images or int64 token ids, labels int64)."""

    x_train: Samples
    y_train: Samples
    x_test: Samples
    y_test: Samples
    input_shape: tuple[int, ...]
    """Shape of one sample: (C, H, W) for images, (F,) for vectors, (seq_len,) for tokens."""
    n_classes: int
    meta: dict[str, Any]

    @property
    def generated(self) -> bool:
        """Whether the splits are generated on demand (:class:`LazySamples`), not tensors."""
        return isinstance(self.x_train, LazySamples)


def require_materialised(data: Dataset, who: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_test, y_test)`` as tensors; a generated dataset skips the point
    (``PointSkipped``: ``who`` needs whole tensors, which such a dataset never has)."""
    parts = (data.x_train, data.y_train, data.x_test, data.y_test)
    tensors = [p for p in parts if isinstance(p, torch.Tensor)]
    if len(tensors) != len(parts):
        raise PointSkipped(f"{who} needs a materialised dataset; dataset {data.meta.get('key')} is generated "
                           f"on demand ({data.meta.get('n_samples')} samples of {list(data.input_shape)})")
    return tensors[0], tensors[1], tensors[2], tensors[3]


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and bytes (in :data:`ARRAY_NAMES` order; those
    of them that ``arrays`` holds)."""
    h = hashlib.sha256()
    for name in (n for n in ARRAY_NAMES if n in arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{arr.dtype.str}|{list(arr.shape)}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _stored(meta: dict[str, Any]) -> bool:
    """Whether the training samples are stored beside the file (d5pipe.levels.stored_samples)."""
    return meta.get("storage", "memory") not in ("memory", "lazy") and not meta.get("lazy")


def _read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (none for a generated dataset: its file is metadata only; no ``x_train`` when it
    is stored beside the file) and the metadata."""
    with np.load(path, allow_pickle=False) as npz:
        meta: dict[str, Any] = json.loads(str(npz["meta_json"]))
        names = () if meta.get("generated") or meta.get("lazy") else [
            n for n in ARRAY_NAMES if not (n == "x_train" and _stored(meta))]
        arrays = {name: np.array(npz[name]) for name in names}
    return arrays, meta


def _check_content(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> bool:
    """The file's arrays (or generated samples) and its stored samples are what was prepared."""
    if meta.get("lazy"):
        train, test = _user_splits(meta)
        return user_samples.head_checksum(train, test, str(meta["key"])) == meta.get("head_checksum")
    generated = meta.get("generated")
    expected = meta.get("file_checksum") if _stored(meta) and not generated else meta.get("checksum")
    found = generated_checksum(meta["config"], _generated_splits(meta)) if generated else arrays_checksum(arrays)
    if expected != found:
        return False
    if _stored(meta):
        stored_samples.verify(path, meta)
    return True


def _valid_existing(path: Path, key: str) -> dict[str, Any] | None:
    """The stored metadata when ``path`` holds dataset ``key`` with a matching checksum."""
    if not path.is_file():
        return None
    try:
        arrays, meta = _read_npz(path)
        if meta.get("key") != key or not _check_content(path, arrays, meta):
            return None
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, D5PipeError):
        return None
    return meta


def _store(meta: dict[str, Any], x_train: Any, out_path: Path) -> None:
    """``storage`` npy or png: write the training samples beside ``out_path`` first (the file
    written after them says they are complete) and note them in ``meta``."""
    storage = meta["config"].get("storage", "memory")
    if storage != "memory":
        meta.update(stored_samples.write(x_train, int(meta["n_train"]), storage, out_path, "dataset.storage"))


def _generated_splits(meta: dict[str, Any]) -> dict[str, LazySamples]:
    """The four LazySamples of a generated dataset's metadata (its ``config``)."""
    conf = resolve({k: v for k, v in meta["config"].items() if k not in ("format_version", "generator_version")})
    parts = lazy_splits(Generator.from_section(conf), conf.test_fraction)
    return dict(zip(ARRAY_NAMES, parts, strict=True))


def generated_checksum(config: dict[str, Any], splits: dict[str, LazySamples]) -> str:
    """sha256 over a generated dataset's canonical ``config`` (format and generator versions
    included) and each split's name, dtype, shape and the bytes of its first
    :data:`CHECKSUM_SAMPLES` items."""
    h = hashlib.sha256()
    h.update(canonical_json(config).encode())
    for name in ARRAY_NAMES:
        part = splits[name]
        head = part[: CHECKSUM_SAMPLES].numpy()
        h.update(f"{name}|{head.dtype.str}|{list(part.shape)}|".encode())
        h.update(np.ascontiguousarray(head).tobytes())
    return h.hexdigest()


def _header(dataset_cfg: dict[str, Any], key: str) -> dict[str, Any]:
    """What every dataset file's metadata starts with: its format, key and canonical config."""
    return {"schema_version": DATASET_FORMAT_VERSION, "key": key, "config": canonical_config(dataset_cfg)}


def _write(out_path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Write the dataset file (its metadata and arrays) atomically; its metadata."""
    buf = io.BytesIO()
    payload: dict[str, Any] = {"meta_json": np.array(json.dumps(meta, sort_keys=True)), **(arrays or {})}
    np.savez(buf, **payload)
    write_bytes(out_path, buf.getvalue())
    return meta


def _prepare_generated(dataset_cfg: dict[str, Any], key: str, out_path: Path) -> dict[str, Any]:
    """Write a generated dataset's metadata file (no arrays); its metadata."""
    meta: dict[str, Any] = {**_header(dataset_cfg, key), "generated": True}
    splits = _generated_splits(meta)
    x_train = splits["x_train"]
    meta.update({
        "checksum": generated_checksum(meta["config"], splits),
        "input_shape": list(x_train.generator.sample_shape),
        "dtype": str(x_train.dtype).removeprefix("torch."),
        "n_samples": x_train.generator.n_samples,
        "n_classes": x_train.generator.n_classes,
        "n_train": len(x_train),
        "n_test": len(splits["x_test"]),
    })
    _store(meta, x_train, out_path)
    return _write(out_path, meta)


def _user_splits(meta: dict[str, Any]) -> tuple[Any, Any]:
    """The factory's Datasets again (the runner's allow-list applies, as when it was prepared)."""
    name = str(meta["config"]["name"])
    tkey = f"dataset.custom.{name}"
    return user_samples.user_datasets(build(meta["config"]["target"], tkey), tkey)


def _load_user_lazy(path: Path, meta: dict[str, Any]) -> Dataset:
    """A lazy user dataset: its Datasets wrapped to index like tensors, first items checked."""
    train, test = _user_splits(meta)
    key = str(meta["key"])
    if len(train) != meta["n_train"] or len(test) != meta["n_test"] or \
            user_samples.head_checksum(train, test, key) != meta.get("head_checksum"):
        raise D5PipeError(f"dataset file {path}: the user's Datasets no longer give what was prepared (sizes or first "
                          "items differ; prepare it again)")
    shape = tuple(int(d) for d in meta["input_shape"])
    tr, te = (user_samples.DatasetSource(ds, shape, key) for ds in (train, test))
    return _dataset(meta, {f"{part}_{split}": LazySamples(source, part, 0, len(ds))  # type: ignore[arg-type]
                           for split, source, ds in (("train", tr, train), ("test", te, test)) for part in ("x", "y")})


def _dataset(meta: dict[str, Any], parts: dict[str, Samples]) -> Dataset:
    """The :class:`Dataset` of ``parts`` (``x_train`` ... ``y_test``) described by ``meta``."""
    return Dataset(parts["x_train"], parts["y_train"], parts["x_test"], parts["y_test"],
                   tuple(int(d) for d in meta["input_shape"]), int(meta["n_classes"]), meta)


def prepare(dataset_cfg: dict[str, Any], out_path: Path) -> dict[str, Any]:
    """Materialise the dataset at ``out_path`` (atomic) unless a valid copy is there; its metadata."""
    out_path = Path(out_path)
    key = dataset_key(dataset_cfg)
    existing = _valid_existing(out_path, key)
    if existing is not None:
        return existing
    if is_lazy(dataset_cfg):
        return _prepare_generated(dataset_cfg, key, out_path)
    conf = resolve(dataset_cfg)
    tkey, target = target_of(dataclasses.asdict(conf), "dataset")
    if conf.storage == "lazy":  # the metadata of one pass over its items (d5pipe.levels.user_samples)
        splits = user_samples.user_datasets(build(target, tkey), tkey)
        return _write(out_path, {**_header(dataset_cfg, key), **user_samples.describe(*splits, key)})
    arrays, declared = user_samples.materialise(build(target, tkey), tkey)
    labels = int(max(arrays["y_train"].max(), arrays["y_test"].max()) + 1)
    if declared is not None and declared < labels:
        raise D5PipeError(f"{tkey}: n_classes={declared} but the labels go up to {labels - 1}")
    meta: dict[str, Any] = {
        **_header(dataset_cfg, key),
        "checksum": arrays_checksum(arrays),
        "input_shape": list(arrays["x_train"].shape[1:]),
        "n_classes": declared if declared is not None else labels,
        "n_train": int(arrays["y_train"].shape[0]),
        "n_test": int(arrays["y_test"].shape[0]),
    }
    _store(meta, arrays["x_train"], out_path)
    if _stored(meta):
        arrays = {k: v for k, v in arrays.items() if k != "x_train"}
        meta["file_checksum"] = arrays_checksum(arrays)
    return _write(out_path, meta, arrays)


def load(path: Path) -> Dataset:
    """Read a prepared dataset; a missing or corrupt file is a D5PipeError naming it."""
    path = Path(path)
    try:
        arrays, meta = _read_npz(path)
    except FileNotFoundError as exc:
        raise D5PipeError(f"dataset file {path} does not exist (run prepare first)") from exc
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise D5PipeError(f"dataset file {path} is not a d5pipe dataset: {exc}") from exc
    if meta.get("generated"):
        return _load_generated(path, meta)
    if meta.get("lazy"):
        return _load_user_lazy(path, meta)
    if not _check_content(path, arrays, meta):
        raise D5PipeError(f"dataset file {path}: checksum mismatch (file corrupt or modified)")
    parts: dict[str, Samples] = {n: torch.from_numpy(a) for n, a in arrays.items()}
    return _dataset(meta, {**parts, **_stored_train(path, meta)})


def _stored_train(path: Path, meta: dict[str, Any]) -> dict[str, Samples]:
    """The stored training samples, read by index like a tensor (one sample at a time by the loop):
    ``{"x_train": ...}`` when they are stored beside the file, else nothing."""
    if not _stored(meta):
        return {}
    source = stored_samples.source(path, meta)
    return {"x_train": LazySamples(source, "x", 0, int(meta["n_train"]))}  # type: ignore[arg-type]


def _load_generated(path: Path, meta: dict[str, Any]) -> Dataset:
    """A generated dataset from its metadata; a checksum that its samples no longer give (a
    changed generator, a modified file) is a D5PipeError."""
    try:
        splits = _generated_splits(meta)
        checksum = generated_checksum(meta["config"], splits)
    except (KeyError, TypeError, AttributeError, D5PipeError) as exc:
        raise D5PipeError(f"dataset file {path}: its generated-dataset metadata is unusable ({exc})") from exc
    if meta.get("checksum") != checksum:
        raise D5PipeError(f"dataset file {path}: checksum mismatch (the generator changed, or the file was "
                          "modified; prepare it again)")
    if _stored(meta):
        stored_samples.verify(path, meta)
    return _dataset(meta, {**splits, **_stored_train(path, meta)})


def ensure(dataset_cfg: dict[str, Any], data_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The prepared file for ``dataset_cfg`` under ``data_dir`` (prepared here if missing)."""
    path = Path(data_dir) / f"{dataset_key(dataset_cfg)}.npz"
    return path, prepare(dataset_cfg, path)


def load_for(dataset_cfg: dict[str, Any], data_dir: Path) -> Dataset:
    """The prepared dataset of ``dataset_cfg`` under ``data_dir``, read and checked once (what a
    stage's ``run_point`` calls); prepared here first when it is missing, foreign or damaged."""
    key = dataset_key(dataset_cfg)
    path = Path(data_dir) / f"{key}.npz"
    if path.is_file():
        try:
            data = load(path)
            if data.meta.get("key") == key:
                return data
        except D5PipeError:
            pass
    prepare(dataset_cfg, path)
    return load(path)
