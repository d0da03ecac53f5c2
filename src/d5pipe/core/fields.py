"""Declared constraints on schema fields, and the checks of values against a schema.

A schema dataclass declares what a value may be next to its default::

    dtype: str = choice("float32", DTYPES)          # one of DTYPES
    ranks: int = at_least(1, 1)                      # >= 1
    budget_s: float = positive(2.0)                  # > 0
    test_fraction: float = between(0.25, 0.0, 1.0)   # 0 < x < 1
    hidden: list[int] = items_at_least([64], 1)      # every element >= 1

OmegaConf checks types at compose time; :func:`d5pipe.config.validate.check_config` checks these
constraints for the composed config and for every distinct sweep value, before any job starts.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import field
from functools import cache
from typing import Any, TypeVar

from d5pipe.core.errors import D5PipeError


def _field(default: Any, **meta: Any) -> Any:
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: copy.deepcopy(value), metadata=meta)
    return field(default=default, metadata=meta)


def choice(default: Any, choices: Sequence[str]) -> Any:
    """A value from ``choices`` (null allowed only when the field is Optional and default None)."""
    return _field(default, choices=tuple(choices))


def at_least(default: Any, minimum: float) -> Any:
    """A number >= ``minimum``."""
    return _field(default, min=minimum)


def positive(default: Any) -> Any:
    """A number > 0."""
    return _field(default, gt=0)


def between(default: Any, low: float, high: float, *, closed_high: bool = False) -> Any:
    """``low < x < high`` (``x <= high`` with ``closed_high``)."""
    return _field(default, gt=low, **({"max": high} if closed_high else {"lt": high}))


def items_at_least(default: list[Any], minimum: float) -> Any:
    """A list whose every element is >= ``minimum``."""
    return _field(default, item_min=minimum)


def later(default: Any, **constraints: Any) -> Any:
    """A field added after point IDs were published (constraints as ``min=``, ``gt=``, ...): at its
    default it is left out of a point's identity (d5pipe.plan.point_config.stage_base), so the
    points that existed before it keep their IDs, seeds and histories. Its default must compute
    what the points computed before it existed."""
    return _field(default, neutral=True, **constraints)


@cache
def neutral_defaults(cls: type) -> dict[str, Any]:
    """Name -> default of the :func:`later` fields of ``cls``."""
    return {name: default_of(cls, name) for name, f in schema_fields(cls).items() if f.metadata.get("neutral")}


_NoneType = type(None)


@cache
def schema_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def schema_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


@cache
def default_of(cls: type, name: str) -> Any:
    """The schema's default of field ``name`` of ``cls`` (the one place a default lives)."""
    f = schema_fields(cls)[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise KeyError(f"{cls.__name__}.{name} has no default")


def setting(section: Any, cls: type, name: str) -> Any:
    """``section[name]``, or the schema's default where a hand-made section leaves it out."""
    value = section.get(name) if section is not None else None
    return default_of(cls, name) if value is None else value


def is_schema(tp: Any) -> bool:
    """True for a schema dataclass (a class, not an instance)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def type_error(tp: Any, value: Any) -> str | None:
    """Why ``value`` does not have type ``tp`` (None when it does). Ints count as floats."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and _NoneType in options:
            return None
        errors = [type_error(o, value) for o in options if o is not _NoneType]
        return None if any(e is None for e in errors) else (errors[0] if errors else "unexpected null")
    if value is None:
        return "null is not allowed here"
    if tp is bool:
        return None if isinstance(value, bool) else f"{value!r} is not a boolean"
    if tp is int:  # an integral float (16.0) denotes the same config value (d5pipe.core.canonical)
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
        return None if ok else f"{value!r} is not an integer"
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"{value!r} is not a number"
    if tp is str:
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if origin is list:
        if not isinstance(value, list):
            return f"{value!r} is not a list"
        (item,) = typing.get_args(tp) or (Any,)
        for v in value:
            err = type_error(item, v)
            if err:
                return f"element {err}"
        return None
    if origin is dict or is_schema(tp):
        return None if isinstance(value, dict) else f"{value!r} is not a mapping"
    return None


def constraint_error(meta: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` breaks a field's declared constraints (None when it does not)."""
    if value is None or not meta:
        return None
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"{value!r} is not one of {', '.join(map(str, choices))}"
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if numeric:
        if "min" in meta and value < meta["min"]:
            return f"{value!r} must be >= {meta['min']}"
        if "gt" in meta and value <= meta["gt"]:
            return f"{value!r} must be > {meta['gt']}"
        if "max" in meta and value > meta["max"]:
            return f"{value!r} must be <= {meta['max']}"
        if "lt" in meta and value >= meta["lt"]:
            return f"{value!r} must be < {meta['lt']}"
    if "item_min" in meta and isinstance(value, list):
        low = [v for v in value if isinstance(v, (int, float)) and v < meta["item_min"]]
        if low:
            return f"{value!r} has element {low[0]!r} below {meta['item_min']}"
    return None


def by_closeness(name: str, candidates: list[str]) -> list[str]:
    """``candidates`` with the close matches of ``name`` first (closest first), then the rest in order."""
    import difflib

    close = difflib.get_close_matches(name, candidates, n=len(candidates), cutoff=0.5)
    return close + [c for c in candidates if c not in close]


def value_error(cls: type, name: str, value: Any) -> str | None:
    """Why ``value`` does not fit field ``name`` of schema ``cls``: its type, then its constraints."""
    return type_error(schema_hints(cls)[name], value) or constraint_error(schema_fields(cls)[name].metadata, value)


def check_value(cls: type, name: str, value: Any, key: str) -> None:
    """Type and constraints of one value of field ``name`` of schema ``cls`` (key names it)."""
    err = value_error(cls, name, value)
    if err:
        raise D5PipeError(f"config error: key '{key}': {err}")


def check_fields(cls: type, data: Mapping[str, Any], prefix: str, skip: frozenset[str] = frozenset()) -> None:
    """Every field of ``data`` against schema ``cls``, recursing into nested schemas (top-level
    fields named in ``skip`` are left to the caller)."""
    hints = schema_hints(cls)
    known = schema_fields(cls)
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in known:
            raise D5PipeError(f"config error: key '{key}' is not in the schema; valid keys of "
                              f"{prefix.rstrip('.') or 'the config'} (closest first): "
                              f"{', '.join(by_closeness(name, list(known)))}")
        tp = hints[name]
        if name in skip:
            continue
        if is_schema(tp) and isinstance(value, Mapping):
            check_fields(tp, value, f"{key}.")
            continue
        check_value(cls, name, value, key)
        args: tuple[Any, ...] = typing.get_args(tp)
        if typing.get_origin(tp) is dict and args and is_schema(args[1]):
            for entry, sub in value.items():
                if sub is not None and not isinstance(sub, Mapping):
                    raise D5PipeError(f"config error: key '{key}.{entry}': {sub!r} is not a mapping")
                check_fields(args[1], sub or {}, f"{key}.{entry}.")
        if typing.get_origin(tp) is list and args and is_schema(args[0]):
            for i, sub in enumerate(value):
                if not isinstance(sub, Mapping):
                    raise D5PipeError(f"config error: key '{key}[{i}]': {sub!r} is not a mapping")
                check_fields(args[0], sub, f"{key}[{i}].")


T = TypeVar("T")


def conf_from_dict(cls: type[T], section: str, data: Mapping[str, Any] | None) -> T:
    """``cls`` filled from ``data`` (defaults for missing keys); unknown keys and values that break
    the schema's types or declared constraints are a one-line D5PipeError."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    items = dict(data or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(items) - known)
    if unknown:
        raise D5PipeError(f"{section}: unknown key(s) {unknown}; known: {sorted(known)}")
    check_fields(cls, items, f"{section}.")
    return cls(**items)
