"""Level 2 checks before any job (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import default_of, setting
from d5pipe.levels.config_checks import check_device_name, check_micro_batches, section
from d5pipe.levels.level2.early_stop import check_early_stop
from d5pipe.levels.level2.schema import OPTIMIZERS, TrainConf
from d5pipe.levels.schema import DatasetConf, check_dataset, check_model
from d5pipe.levels.targets import check_metrics, check_slots, metric_user_targets
from d5pipe.levels.targets import used_targets as _used

SLOTS: tuple[str, ...] = ("model", "dataset", "optimizer", "reference_optimizer", "scheduler", "sampler", "framework")
"""The plug-in slots a level-2 point uses (d5pipe.levels.targets.SLOTS)."""


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-2 point's resolved config (``model``, ``dataset``, ``train``)."""
    check_slots(cfg, SLOTS)
    check_metrics(section(cfg, "train"))
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    check_device_name(setting(section(cfg, "train"), TrainConf, "device"), "train.device")
    check_micro_batches(section(cfg, "train"), TrainConf, "train")
    check_augment(cfg)
    check_framework(cfg)
    check_early_stop(dict(section(cfg, "train")))


FRAMEWORK_LOOP_KEEPS: tuple[str, ...] = ("num_workers", "augment", "sampler", "reference_optimizer", "measure_loader",
                                         "measure_memory", "micro_batches", "metrics", "schedule", "device")
"""``train`` keys the framework loop does not apply: with ``train.framework`` they must keep their
defaults (batches in memory in the shuffled order, a constant learning rate, the CPU)."""


def check_framework(cfg: Mapping[str, Any]) -> None:
    """With ``train.framework``: a built-in optimizer every framework maps, and the keys of
    :data:`FRAMEWORK_LOOP_KEEPS` at their defaults."""
    train = section(cfg, "train")
    if not setting(train, TrainConf, "framework"):
        return
    optimizer = setting(train, TrainConf, "optimizer")
    if optimizer not in OPTIMIZERS:
        raise D5PipeError(f"train.optimizer: {optimizer!r} has no mapping onto other frameworks; with "
                          f"train.framework use one of {', '.join(OPTIMIZERS)}")
    for key in FRAMEWORK_LOOP_KEEPS:
        if setting(train, TrainConf, key) != default_of(TrainConf, key):
            raise D5PipeError(f"train.{key}: the framework loop (train.framework) does not apply it; "
                              f"leave it at {default_of(TrainConf, key)!r}")
    if setting(section(cfg, "dataset"), DatasetConf, "storage") != default_of(DatasetConf, "storage"):
        raise D5PipeError("dataset.storage: the framework loop (train.framework) trains from the split in memory")


def check_augment(cfg: Mapping[str, Any]) -> None:
    """``train.augment`` mirrors images: not token ids, tabular rows or flat vectors."""
    augment = setting(section(cfg, "train"), TrainConf, "augment")
    dataset = section(cfg, "dataset")
    name = setting(dataset, DatasetConf, "name")
    flat = name in ("breast_cancer", "wine", "synthetic_tokens") or (name == "synthetic" and not dataset.get("image_shape"))
    if augment != "none" and flat:
        raise D5PipeError(f"train.augment: {augment!r} mirrors images, and dataset {name} has none")


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level2 point uses (its code hash covers them)."""
    return _used(cfg, SLOTS) + metric_user_targets(section(cfg, "train"))  # and those among train.metrics


def check_targets(cfg: Mapping[str, Any]) -> None:
    """The plug-in registries, selectors and extra metrics against the runner's allow-list."""
    check_slots(cfg, SLOTS)
    check_metrics(section(cfg, "train"))
