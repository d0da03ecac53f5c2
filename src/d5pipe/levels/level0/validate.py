"""Level 0 checks before any job (torch-free): operator names, custom targets, device, and what
the point's framework takes (its declaration: d5pipe.levels.level0.frameworks).

``check_point`` runs per planned point (d5pipe.plan.build); the registry checks the same targets
again before it imports them (d5pipe.levels.level0.registry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from d5pipe.core.allowlist import check_deprecated_prefixes
from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.levels.config_checks import check_device_name, section
from d5pipe.levels.declare import installed, missing_package
from d5pipe.levels.level0 import compiled
from d5pipe.levels.level0.frameworks import FRAMEWORKS, NAMES
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used
from d5pipe.measure.timer_schema import check_timer

SLOTS: tuple[str, ...] = ("operator",)
"""The plug-in slots a level-0 point uses (d5pipe.levels.targets.SLOTS)."""


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-0 point's resolved config (sections ``operators`` and ``timer``)."""
    check_targets(cfg)
    operators = section(cfg, "operators")
    check_device_name(setting(operators, OperatorsConf, "device"), "operators.device")
    check_framework(operators)
    check_timer(dict(section(cfg, "timer")))


def check_framework(operators: Mapping[str, Any], is_installed: Callable[[str], bool] = installed) -> None:
    """``operators.framework``: a declared framework whose packages are installed here, and the
    ``impl``, ``layout`` and device kind it takes (one line naming the key otherwise)."""
    name = setting(operators, OperatorsConf, "framework")
    framework = FRAMEWORKS.get(name)
    if framework is None:
        raise D5PipeError(f"config error: key 'operators.framework': unknown value {name!r} (known: {', '.join(NAMES)})")
    missing = missing_package(framework.packages, is_installed)
    if missing is not None:
        raise D5PipeError(f"config error: key 'operators.framework': {name!r} needs the Python package {missing!r}, "
                          "which is not installed here (pip install 'd5pipe[frameworks]'; make install does)")
    device = str(setting(operators, OperatorsConf, "device")).split(":")[0]
    for key, value, allowed in (("impl", setting(operators, OperatorsConf, "impl"), framework.impls),
                                ("layout", setting(operators, OperatorsConf, "layout"), framework.layouts),
                                ("device", device, framework.devices)):
        if value not in allowed:
            raise D5PipeError(f"config error: key 'operators.{key}': {value!r} does not apply to "
                              f"operators.framework={name} (it takes {', '.join(allowed)})")


def used_targets(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets a level-0 point uses (its code hash covers them): a
    compiled operator's package among them, its native sources part of its code (d5pipe.core.code_hash)."""
    found = compiled.selected(section(cfg, "operators"))
    return _used(cfg, SLOTS) + ([(f"{found[0]}.package", str(found[1]["package"]))] if found else [])


def builds(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The point's compiled operator's build (key -> spec), checked: paths, entry points, a compiler."""
    found = compiled.selected(section(cfg, "operators"))
    if found is None:
        return {}
    spec = compiled.check_entry(found[1], found[0])
    return {spec.key(): asdict(spec)}


def check_targets(cfg: Mapping[str, Any]) -> None:
    """The operator registry and selector against the runner's allow-list; nothing imported."""
    check_deprecated_prefixes(section(cfg, "operators").get("allowed_prefixes"), "operators.allowed_prefixes")
    check_slots(cfg, SLOTS)
    compiled.check_allowed(section(cfg, "operators"))
