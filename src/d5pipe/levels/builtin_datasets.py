"""The built-in materialised datasets: scikit-learn's bundled ``digits`` (8x8 images, stored as
(1, 8, 8)), ``breast_cancer`` and ``wine`` (tabular, standardised with train-split statistics), and
``synthetic`` (seeded Gaussian clusters around class prototypes, flat or (C, H, W)), each split into
train and test by a seeded, stratified permutation. :func:`builtin_arrays` is their registered target
(d5pipe.levels.targets); d5pipe.levels.datasets materialises and loads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.dataset_key import LAZY_DATASET_NAMES, SKLEARN_LOADERS
from d5pipe.levels.schema import DatasetConf


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
    return (to_pixels(x) if conf.pixels == "uint8" else x), y


def to_pixels(x: np.ndarray) -> np.ndarray:
    """``pixels: uint8``: each value rounded to the nearest of ``(q - 128) / 32``, ``q`` in 0..255
    (the float32 values are exact; d5pipe.levels.stored_samples writes ``q`` as PNG pixels)."""
    q = np.clip(np.rint(x * PIXEL_SCALE + PIXEL_ZERO), 0, 255)
    return ((q - PIXEL_ZERO) / PIXEL_SCALE).astype(x.dtype)


PIXEL_SCALE, PIXEL_ZERO = 32.0, 128.0
"""``pixels: uint8`` levels: value = (q - PIXEL_ZERO) / PIXEL_SCALE."""


def builtin_arrays(**section: Any) -> dict[str, np.ndarray]:
    """The registered target of the built-in datasets: their arrays from a ``dataset`` section."""
    if section.get("name") in LAZY_DATASET_NAMES:
        raise D5PipeError(f"dataset.name: {section['name']} is generated on demand, never materialised "
                          "(d5pipe.levels.datasets.load gives its LazySamples)")
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
    splits = {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}
    return {n: np.ascontiguousarray(v, dtype=np.float32 if n.startswith("x") else np.int64) for n, v in splits.items()}
