"""Level 0 checks before any job (torch-free): operator names, custom targets, device.

``check_point`` runs per planned point (d5pipe.plan.build); the registry checks the same targets
again before it imports them (d5pipe.levels.level0.registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from d5pipe.core.allowlist import check_deprecated_prefixes
from d5pipe.core.fields import setting
from d5pipe.levels.config_checks import check_device_name, section
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used
from d5pipe.measure.timer_schema import check_timer

SLOTS: tuple[str, ...] = ("operator",)
"""The plug-in slots a level-0 point uses (d5pipe.levels.targets.SLOTS)."""


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-0 point's resolved config (sections ``operators`` and ``timer``)."""
    check_targets(cfg)
    check_device_name(setting(section(cfg, "operators"), OperatorsConf, "device"), "operators.device")
    check_timer(dict(section(cfg, "timer")))


used_targets = partial(_used, slots=SLOTS)
"""``(key, dotted path)`` of the user targets a level-0 point uses (its code hash covers them)."""


def check_targets(cfg: Mapping[str, Any]) -> None:
    """The operator registry and selector against the runner's allow-list; nothing imported."""
    check_deprecated_prefixes(section(cfg, "operators").get("allowed_prefixes"), "operators.allowed_prefixes")
    check_slots(cfg, SLOTS)
