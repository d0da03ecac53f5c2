"""Torch-free checks shared by the levels' ``validate`` modules (run by ``d5pipe plan``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from d5pipe.core.errors import D5PipeError

_DEVICE = re.compile(r"^(cpu|cuda(:[0-9]+)?)$")


def check_device_name(device: Any, key: str) -> None:
    """``cpu``, ``cuda`` or ``cuda:N`` (whether that device exists is decided where it runs)."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise D5PipeError(f"config error: key '{key}': {device!r} is not a device (use cpu, cuda or cuda:N)")


def section(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = cfg.get(name) or {}
    if not isinstance(value, Mapping):
        raise D5PipeError(f"config error: key '{name}' must be a mapping")
    return value
