"""Level 0 checks before any job (torch-free): operator names, custom targets, device.

``check_point`` runs per planned point (d5pipe.plan.build); the registry checks the same targets
again before it imports them (d5pipe.levels.level0.registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.allowlist import check_deprecated_prefixes
from d5pipe.levels.config_checks import check_device_name, section
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used
from d5pipe.measure.timer_schema import check_timer


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-0 point's resolved config (sections ``operators`` and ``timer``)."""
    ops = section(cfg, "operators")
    check_deprecated_prefixes(ops.get("allowed_prefixes"), "operators.allowed_prefixes")
    check_slots(cfg, "level0")
    check_device_name(ops.get("device", "cpu"), "operators.device")
    check_timer(dict(section(cfg, "timer")))


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level-0 point uses (its code hash covers them)."""
    return _used(cfg, "level0")


def validate_operators(operators: Mapping[str, Any] | None) -> None:
    """The ``operators`` section alone: schema keys and values, custom targets. Nothing is imported."""
    import dataclasses

    from d5pipe.levels.level0.schema import OperatorsConf
    from d5pipe.levels.schema import conf_from_dict

    conf = conf_from_dict(OperatorsConf, "operators", operators)
    check_point({"operators": dataclasses.asdict(conf), "timer": {}})
