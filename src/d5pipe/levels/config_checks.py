"""Torch-free checks shared by the levels' ``validate`` modules (run by ``d5pipe plan``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.levels.schema import DatasetConf

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


def check_micro_batches(values: Mapping[str, Any], schema: type, name: str) -> None:
    """``NAME.micro_batches`` splits a batch of ``NAME.batch_size``: no more parts than samples."""
    k = int(setting(values, schema, "micro_batches"))
    batch = int(setting(values, schema, "batch_size"))
    if k > batch:
        raise D5PipeError(f"{name}.micro_batches: {k} micro-batches of a batch of {batch} ({name}.batch_size) "
                          "would leave some empty; use at most the batch size")


def check_memory_storage(cfg: Mapping[str, Any], level: str) -> None:
    """``dataset.storage`` is level 2's (its training split read one sample at a time): a level
    that reads its data otherwise refuses a storage it would ignore."""
    storage = setting(section(cfg, "dataset"), DatasetConf, "storage")
    if storage != "memory":
        raise D5PipeError(f"dataset.storage: {storage!r} -- {level} does not read a stored training split "
                          "(level 2 does); leave it at memory for its stages")
