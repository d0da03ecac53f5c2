"""Which dataset a config means, without torch: its validated section and its stable key.

:func:`dataset_key` names a dataset config ``<name>-<16 hex>`` from the canonical JSON of the keys
that shape the data (e.g. ``n_samples`` does not change ``digits``); the planner calls it per
distinct dataset config, so ``d5pipe plan`` never imports torch. Materialising and loading the
data is d5pipe.levels.datasets.

The generated datasets (:data:`LAZY_DATASET_NAMES`, d5pipe.levels.lazy_samples) are keyed by their
own shaping keys (:data:`LAZY_KEYS`) and the generator's version; the keys of the other names are
unchanged by them.

A user dataset (``dataset.custom``) is named by its target (arguments included) and the hash of
its module's source (d5pipe.core.code_hash), so editing the code makes a new dataset file.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from d5pipe.core.canonical import digest
from d5pipe.core.fields import conf_from_dict, default_of, setting
from d5pipe.levels.schema import DATASET_NAMES as SCHEMA_DATASET_NAMES
from d5pipe.levels.schema import DatasetConf, check_dataset

DATASET_FORMAT_VERSION = 1
"""Bump when the generated arrays change for the same config (changes every key)."""

COMMON_KEYS: tuple[str, ...] = ("name", "test_fraction", "split_seed")
SYNTHETIC_KEYS: tuple[str, ...] = (
    "n_samples",
    "n_features",
    "n_classes",
    "image_shape",
    "noise",
    "generator_seed",
)
LAZY_KEYS: dict[str, tuple[str, ...]] = {
    "synthetic_images": ("name", "test_fraction", "n_samples", "n_classes", "image_shape", "noise",
                         "generator_seed"),
    "synthetic_tokens": ("name", "test_fraction", "n_samples", "n_classes", "seq_len", "vocab_size",
                         "generator_seed"),
}
"""What shapes a generated dataset (``split_seed`` does not: its split is by index)."""
LATER_KEYS: tuple[str, ...] = ("storage", "pixels")
"""Keys added after dataset keys were published: part of a key only away from their defaults, so
the datasets that existed before them keep their keys (and files, caches and checksums)."""
LAZY_DATASET_NAMES: tuple[str, ...] = tuple(LAZY_KEYS)
"""Built-in datasets generated per sample on demand, never materialised."""
LAZY_GENERATOR_VERSION = 1
"""Bump when d5pipe.levels.lazy_samples generates other samples for the same config: part of the
generated datasets' keys (and checksums), so a change of the generator makes new dataset files."""
SKLEARN_LOADERS: dict[str, str] = {
    "digits": "load_digits",
    "breast_cancer": "load_breast_cancer",
    "wine": "load_wine",
}
DATASET_NAMES: tuple[str, ...] = SCHEMA_DATASET_NAMES
"""Every name has a source: a key of :data:`SKLEARN_LOADERS`, ``synthetic`` or a generated
dataset (:data:`LAZY_DATASET_NAMES`) (tested)."""


def is_lazy(dataset_cfg: dict[str, Any]) -> bool:
    """Whether ``dataset_cfg`` names a generated dataset (nothing materialised; LazySamples)."""
    return str(setting(dataset_cfg, DatasetConf, "name")) in LAZY_DATASET_NAMES


def resolve(dataset_cfg: dict[str, Any]) -> DatasetConf:
    """The validated :class:`DatasetConf` for a plain ``dataset`` section."""
    conf = conf_from_dict(DatasetConf, "dataset", dataset_cfg)
    check_dataset(dataclasses.asdict(conf))
    return conf


def canonical_config(dataset_cfg: dict[str, Any]) -> dict[str, Any]:
    """The keys that determine the arrays, plus the format version (and, for a user dataset,
    its target and code hash)."""
    conf = dataclasses.asdict(resolve(dataset_cfg))
    later = {k: conf[k] for k in LATER_KEYS if conf[k] != default_of(DatasetConf, k)}
    if conf["name"] not in DATASET_NAMES:
        return {**_custom_canonical(conf), **later}
    if conf["name"] in LAZY_KEYS:
        lazy = {k: conf[k] for k in LAZY_KEYS[conf["name"]]}
        return {**lazy, **later, "format_version": DATASET_FORMAT_VERSION, "generator_version": LAZY_GENERATOR_VERSION}
    keys = COMMON_KEYS + (SYNTHETIC_KEYS if conf["name"] == "synthetic" else ())
    return {**{k: conf[k] for k in keys}, **later, "format_version": DATASET_FORMAT_VERSION}


def _custom_canonical(conf: dict[str, Any]) -> dict[str, Any]:
    from d5pipe.core.allowlist import allow_list, check_target
    from d5pipe.core.code_hash import module_code
    from d5pipe.levels.targets import check_slot, target_of

    check_slot({"dataset": conf}, "dataset")
    key, target = target_of(conf, "dataset")
    prefixes = allow_list()
    found = (module_code(path, prefixes) for path in check_target(target, key, prefixes))
    code = {mc.module: mc.sha256 for mc in found if mc is not None}
    return {"name": conf["name"], "target": target, "code": code, "format_version": DATASET_FORMAT_VERSION}


def dataset_key(dataset_cfg: dict[str, Any]) -> str:
    """Stable short name of a dataset config, e.g. ``digits-1a2b3c4d5e6f7a8b``."""
    canon = canonical_config(dataset_cfg)
    return f"{canon['name']}-{digest(canon, 16)}"
