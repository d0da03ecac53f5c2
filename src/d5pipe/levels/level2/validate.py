"""Level 2 checks before any job (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.levels.config_checks import check_device_name, section
from d5pipe.levels.schema import check_dataset, check_model
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-2 point's resolved config (``model``, ``dataset``, ``train``)."""
    check_slots(cfg, "level2")
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    check_device_name(section(cfg, "train").get("device", "cpu"), "train.device")


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level2 point uses (its code hash covers them)."""
    return _used(cfg, "level2")
