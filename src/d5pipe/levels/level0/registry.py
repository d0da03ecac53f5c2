"""Operator lookup: built-ins and user operators take one path (d5pipe.levels.targets).

``operators.op`` names a built-in (registered as ``d5pipe.levels.level0.operators.builtin_spec``)
or a key of ``operators.custom``, whose value is a target:

* ``{_target_: mypkg.ops.make_op, size_hint: 3}`` -- a factory called with those arguments that
  returns an :class:`OperatorSpec` (Hydra ``instantiate`` semantics);
* ``{_target_: mypkg.ops.MYOP}`` or the short form ``"mypkg.ops:MYOP"`` -- an
  :class:`OperatorSpec` object itself.

Every target is checked against the allow-list of the person running d5pipe (d5pipe.core.allowlist) before anything
is imported; anything else is a one-line D5PipeError naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.allowlist import HYDRA_KEYS, TARGET_KEY
from d5pipe.core.errors import D5PipeError
from d5pipe.levels.instantiate import build, locate
from d5pipe.levels.level0.spec import OperatorSpec
from d5pipe.levels.targets import check_slot, target_of


def build_operator(key: str, target: Mapping[str, Any]) -> OperatorSpec:
    """The spec a target names or builds (see the module docstring)."""
    obj = locate(str(target[TARGET_KEY]), key)
    if not isinstance(obj, OperatorSpec):
        if not callable(obj):
            raise D5PipeError(f"{key}: {target[TARGET_KEY]!r} is a {type(obj).__name__}, not a "
                              "d5pipe.levels.level0.spec.OperatorSpec")
        obj = build(target, key)
    elif set(target) - HYDRA_KEYS:
        raise D5PipeError(f"{key}: {target[TARGET_KEY]!r} is an OperatorSpec object; it takes no arguments")
    if not isinstance(obj, OperatorSpec):
        raise D5PipeError(f"{key}: {target[TARGET_KEY]!r} returned a {type(obj).__name__}, not a "
                          "d5pipe.levels.level0.spec.OperatorSpec")
    return obj


def resolve_operator(operators: Mapping[str, Any]) -> OperatorSpec:
    """The spec for ``operators.op`` (every custom entry is checked first, not only the selected
    one, so a bad entry is reported on every point of the sweep)."""
    check_slot({"operators": operators}, "operator")
    key, target = target_of(operators, "operator")
    return build_operator(key, target)
