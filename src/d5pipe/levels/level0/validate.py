"""Level 0 checks before any job (torch-free): operator names, custom import paths, device.

``check_point`` runs per planned point (d5pipe.plan.build), ``module_allowed`` and
``check_custom_paths`` also guard the import itself (d5pipe.levels.level0.registry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from d5pipe import D5PipeError
from d5pipe.levels.checks import check_device, section
from d5pipe.levels.level0.schema import BUILTIN_OPERATORS
from d5pipe.measure.timer_schema import check_timer


def module_allowed(module: str, allowed_prefixes: Sequence[str]) -> bool:
    """True when ``module`` is under one of the prefixes.

    A prefix ending in ``.`` (``"d5pipe."``) admits that package and its submodules; a prefix
    without the dot is a package name and admits itself and its submodules, never ``d5pipe_x``.
    """
    for prefix in allowed_prefixes:
        package = prefix[:-1] if prefix.endswith(".") else prefix
        if package and (module == package or module.startswith(package + ".")):
            return True
    return False


def check_custom_paths(custom: Mapping[str, str], allowed_prefixes: Sequence[str]) -> None:
    """Raise ``D5PipeError`` for the first custom import path that is malformed, shadows a
    built-in or lies outside the allowed prefixes. Nothing is imported."""
    for name, path in custom.items():
        key = f"operators.custom.{name}"
        if name in BUILTIN_OPERATORS:
            raise D5PipeError(f"{key}: a custom operator may not reuse the built-in name {name!r}")
        module_name, sep, attr = str(path).partition(":")
        if not sep or not module_name or not attr:
            raise D5PipeError(f"{key}: import path {path!r} must look like 'package.module:attribute'")
        if not module_allowed(module_name, allowed_prefixes):
            raise D5PipeError(
                f"{key}: import path {path!r} is outside operators.allowed_prefixes "
                f"{list(allowed_prefixes)}"
            )


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-0 point's resolved config (sections ``operators`` and ``timer``)."""
    ops = section(cfg, "operators")
    custom = dict(ops.get("custom") or {})
    check_custom_paths(custom, list(ops.get("allowed_prefixes") or []))
    op = ops.get("op")
    if op not in BUILTIN_OPERATORS and op not in custom:
        known = ", ".join([*BUILTIN_OPERATORS, *custom])
        raise D5PipeError(f"config error: key 'operators.op': unknown operator {op!r} (known: {known})")
    check_device(ops.get("device", "cpu"), "operators.device")
    check_timer(dict(section(cfg, "timer")))


def validate_operators(operators: Mapping[str, Any] | None) -> None:
    """The ``operators`` section alone: schema keys and values, custom paths. Nothing is imported."""
    from d5pipe.levels.level0.schema import OperatorsConf
    from d5pipe.levels.schema import conf_from_dict

    conf = conf_from_dict(OperatorsConf, "operators", operators)
    check_custom_paths(conf.custom, conf.allowed_prefixes)
