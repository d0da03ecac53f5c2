"""Operator lookup: built-ins plus user operators imported from allowed module prefixes.

``operators.custom: {name: "module:attr"}`` names an :class:`OperatorSpec` object. The module is
imported only when it lies under one of ``operators.allowed_prefixes`` (default ``["d5pipe."]``);
anything else is a user error (``D5PipeError``), raised before any import happens.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

from d5pipe import D5PipeError
from d5pipe.levels.level0.operators import BUILTIN_SPECS
from d5pipe.levels.level0.spec import OperatorSpec
from d5pipe.levels.level0.validate import check_custom_paths, module_allowed


def import_custom(name: str, path: str, allowed_prefixes: Sequence[str]) -> OperatorSpec:
    """Import ``module:attr`` for custom operator ``name`` after checking the allowed prefixes."""
    key = f"operators.custom.{name}"
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise D5PipeError(f"{key}: import path {path!r} must look like 'package.module:attribute'")
    if not module_allowed(module_name, allowed_prefixes):
        raise D5PipeError(
            f"{key}: import path {path!r} is outside operators.allowed_prefixes "
            f"{list(allowed_prefixes)}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise D5PipeError(f"{key}: cannot import module {module_name!r} ({err})") from err
    try:
        obj = getattr(module, attr)
    except AttributeError as err:
        raise D5PipeError(f"{key}: module {module_name!r} has no attribute {attr!r}") from err
    if not isinstance(obj, OperatorSpec):
        raise D5PipeError(
            f"{key}: {path!r} is a {type(obj).__name__}, not a d5pipe.levels.level0.spec.OperatorSpec"
        )
    return obj


def resolve_operator(
    op: str, custom: Mapping[str, str], allowed_prefixes: Sequence[str]
) -> OperatorSpec:
    """The spec for ``operators.op``: a custom operator of that name, else a built-in.

    Every custom path is checked against the allowed prefixes (not only the selected one), so a
    bad entry is reported on every point of the sweep, not just the point that uses it.
    """
    check_custom_paths(custom, allowed_prefixes)
    if op in custom:
        return import_custom(op, custom[op], allowed_prefixes)
    if op in BUILTIN_SPECS:
        return BUILTIN_SPECS[op]
    known = sorted(set(BUILTIN_SPECS) | set(custom))
    raise D5PipeError(f"operators.op: unknown operator {op!r}; known: {known}")
