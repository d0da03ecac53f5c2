"""Level 1 checks before any job (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe import D5PipeError
from d5pipe.levels.checks import check_device, section
from d5pipe.levels.schema import check_dataset, check_model
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used
from d5pipe.measure.timer_schema import check_timer


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-1 point's resolved config (``model``, ``dataset``, ``level1``, ``timer``)."""
    check_slots(cfg, "level1")
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    level1 = section(cfg, "level1")
    check_device(level1.get("device", "cpu"), "level1.device")
    runtime = str(level1.get("runtime", "torch") or "torch")
    if runtime != "torch" and str(level1.get("impl", "eager")) != "eager":
        raise D5PipeError(f"config error: key 'level1.impl': {level1.get('impl')!r} applies to level1.runtime=torch "
                          f"only (got runtime {runtime!r}; use impl eager)")
    check_timer(dict(section(cfg, "timer")))


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level1 point uses (its code hash covers them)."""
    return _used(cfg, "level1")
