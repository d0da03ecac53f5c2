"""Level 0 checks before any job (torch-free): operator names, custom targets, device.

``check_point`` runs per planned point (d5pipe.plan.build); the registry checks the same targets
again before it imports them (d5pipe.levels.level0.registry).
"""

from __future__ import annotations

from collections.abc import Mapping
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
    ops = section(cfg, "operators")
    check_deprecated_prefixes(ops.get("allowed_prefixes"), "operators.allowed_prefixes")
    check_slots(cfg, SLOTS)
    check_device_name(setting(ops, OperatorsConf, "device"), "operators.device")
    check_timer(dict(section(cfg, "timer")))


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level-0 point uses (its code hash covers them)."""
    return _used(cfg, SLOTS)


def validate_operators(operators: Mapping[str, Any] | None) -> None:
    """The ``operators`` section alone: schema keys and values, custom targets. Nothing is imported."""
    import dataclasses

    from d5pipe.core.fields import conf_from_dict
    from d5pipe.levels.level0.schema import OperatorsConf

    conf = conf_from_dict(OperatorsConf, "operators", operators)
    check_point({"operators": dataclasses.asdict(conf), "timer": {}})


def check_targets(cfg: Mapping[str, Any]) -> None:
    """The operator registry and selector against the runner's allow-list; nothing imported."""
    check_deprecated_prefixes(section(cfg, "operators").get("allowed_prefixes"), "operators.allowed_prefixes")
    check_slots(cfg, SLOTS)
