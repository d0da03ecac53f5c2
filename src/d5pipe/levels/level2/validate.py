"""Level 2 checks before any job (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.levels.checks import check_device, section
from d5pipe.levels.schema import check_dataset, check_model


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-2 point's resolved config (``model``, ``dataset``, ``train``)."""
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    check_device(section(cfg, "train").get("device", "cpu"), "train.device")
