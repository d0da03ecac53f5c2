"""Check every value of a composed config before any job starts (``d5pipe plan`` / ``d5pipe run``).

What is checked here, on plain data (no torch, scipy or pandas is imported):

* **structure**: the config re-merged into the structured schema, so keys added with Hydra's
  ``+key=value`` (which Hydra lets past the schema) and wrong types are one-line errors;
* **declared constraints** of every schema field (d5pipe.config.fields: choices, ranges, element
  ranges) for the composed values;
* **stages**: known (d5pipe.config.stages), at least one, no duplicates;
* **sweep axes**: each names an existing key of a sweepable section and every distinct value has
  the field's type and satisfies its constraints (once per value, not per point); recipe keys
  marked fixed are not swept;
* **acceptance thresholds** and **executor resources** (known stage entries, integer ranges).

Cross-field checks of one point (e.g. a batch divisible by the ranks) are done per point by the
planner through each stage's ``validate`` target (d5pipe.plan.build). Every error is a
:class:`D5PipeError` line naming the key.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from d5pipe import D5PipeError
from d5pipe.config.schema import D5Config
from d5pipe.config.stages import RESOURCE_ENTRIES, STAGE_NAMES, SWEEPABLE_SECTIONS

_NoneType = type(None)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _is_schema(tp: Any) -> bool:
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
    if tp is int:  # an integral float (16.0) denotes the same config value (d5pipe.plan.canonical)
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
    if origin is dict:
        return None if isinstance(value, dict) else f"{value!r} is not a mapping"
    if _is_schema(tp):
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


def section_schema(path: str) -> type | None:
    """The schema class of the section at dotted ``path`` ("" is the root), if it is one."""
    cls: type = D5Config
    for part in [p for p in path.split(".") if p]:
        tp = _hints(cls).get(part)
        if tp is None or not _is_schema(tp):
            return None
        cls = tp
    return cls


def unknown_key(key: str) -> str:
    """``not in the schema; valid keys of level1 (closest first): batch_size, ...`` for ``key``."""
    parent, _, name = key.rpartition(".")
    cls = section_schema(parent)
    if cls is None:
        return "not in the schema"
    return (f"not in the schema; valid keys of {parent or 'the config'} (closest first): "
            f"{', '.join(by_closeness(name, list(_fields(cls))))}")


def check_value(cls: type, name: str, value: Any, key: str) -> None:
    """Type and constraints of one value of field ``name`` of schema ``cls`` (key names it)."""
    err = type_error(_hints(cls)[name], value) or constraint_error(_fields(cls)[name].metadata, value)
    if err:
        raise D5PipeError(f"config error: key '{key}': {err}")


def check_fields(cls: type, data: Mapping[str, Any], prefix: str) -> None:
    """Every field of ``data`` against schema ``cls``, recursing into nested schemas."""
    hints = _hints(cls)
    known = _fields(cls)
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in known:
            raise D5PipeError(f"config error: key '{key}' is not in the schema; valid keys of "
                              f"{prefix.rstrip('.') or 'the config'} (closest first): "
                              f"{', '.join(by_closeness(name, list(known)))}")
        tp = hints[name]
        if name == "sweep" and cls is D5Config:
            continue  # checked value by value in check_sweep
        if _is_schema(tp) and isinstance(value, Mapping):
            check_fields(tp, value, f"{key}.")
            continue
        check_value(cls, name, value, key)
        args: tuple[Any, ...] = typing.get_args(tp)
        if typing.get_origin(tp) is dict and args and _is_schema(args[1]):
            for entry, sub in value.items():
                if sub is not None and not isinstance(sub, Mapping):
                    raise D5PipeError(f"config error: key '{key}.{entry}': {sub!r} is not a mapping")
                check_fields(args[1], sub or {}, f"{key}.{entry}.")
        if typing.get_origin(tp) is list and args and _is_schema(args[0]):
            for i, sub in enumerate(value):
                if not isinstance(sub, Mapping):
                    raise D5PipeError(f"config error: key '{key}[{i}]': {sub!r} is not a mapping")
                check_fields(args[0], sub, f"{key}[{i}].")


def schema_field(dotted: str) -> tuple[type, str] | None:
    """``(schema class, field name)`` of a dotted config key, or None when there is none."""
    cls: Any = D5Config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not _is_schema(cls) or part not in _fields(cls):
            return None
        if i == len(parts) - 1:
            return cls, part
        cls = _hints(cls)[part]
    return None


def sweep_axes(sweep: Mapping[str, Any]) -> Iterator[tuple[str, str, list[Any]]]:
    """``(where, axis, values)`` of every grid axis and zip member."""
    grid = sweep.get("grid") or {}
    if not isinstance(grid, Mapping):
        raise D5PipeError("config error: key 'sweep.grid' must map axis -> list of values")
    for axis, values in grid.items():
        yield f"sweep.grid.{axis}", str(axis), values
    zips = sweep.get("zip") or []
    if not isinstance(zips, list):
        raise D5PipeError("config error: key 'sweep.zip' must be a list of groups")
    for i, group in enumerate(zips):
        if not isinstance(group, Mapping):
            raise D5PipeError(f"config error: key 'sweep.zip[{i}]' must map axis -> list of values")
        for axis, values in group.items():
            yield f"sweep.zip[{i}].{axis}", str(axis), values


def check_sweep(config: Mapping[str, Any]) -> None:
    """Every axis names a sweepable schema key; every distinct value fits it; fixed keys stay fixed."""
    from d5pipe.plan.canonical import canonical_json
    from d5pipe.plan.recipes import check_fixed

    axes: list[str] = []
    for where, axis, values in sweep_axes(config.get("sweep") or {}):
        section = axis.split(".", 1)[0]
        if section not in SWEEPABLE_SECTIONS:
            raise D5PipeError(f"sweep axis '{axis}': section '{section}' cannot be swept "
                              f"(sweepable: {', '.join(sorted(SWEEPABLE_SECTIONS))})")
        target = schema_field(axis)
        if target is None:
            raise D5PipeError(f"sweep axis '{axis}': no such config key")
        if not isinstance(values, list):
            raise D5PipeError(f"{where}: expected a list of values, got {values!r}")
        cls, name = target
        seen: set[str] = set()
        for v in values:
            key = canonical_json(v) if not isinstance(v, (str, int, float, bool)) else repr(v)
            if key in seen:
                continue
            seen.add(key)
            err = type_error(_hints(cls)[name], v) or constraint_error(_fields(cls)[name].metadata, v)
            if err:
                raise D5PipeError(f"{where}: value {v!r} does not fit key '{axis}': {err}")
        axes.append(axis)
    check_fixed(list((config.get("recipe") or {}).get("fixed") or []), axes)


def check_stages(config: Mapping[str, Any]) -> None:
    stages = config.get("stages") or []
    if not stages:
        raise D5PipeError("config error: key 'stages' is empty (list at least one of "
                          f"{', '.join(STAGE_NAMES)})")
    for s in stages:
        if s not in STAGE_NAMES:
            raise D5PipeError(f"config error: key 'stages' has unknown stage '{s}' "
                              f"(known: {', '.join(STAGE_NAMES)})")
    if len(set(stages)) != len(stages):
        raise D5PipeError(f"config error: key 'stages' lists a stage twice: {list(stages)}")


def check_resources(executor: Mapping[str, Any]) -> None:
    for entry in (executor.get("resources") or {}):
        if entry not in RESOURCE_ENTRIES:
            raise D5PipeError(f"config error: key 'executor.resources.{entry}': unknown entry "
                              f"(known: {', '.join(RESOURCE_ENTRIES)})")


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(name: Any) -> None:
    """An experiment name is one path component: letters, digits, ``_ . -``; no ``..``."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise D5PipeError(f"config error: key 'name': {name!r} is not a valid experiment name "
                          "(letters, digits, _ . -; no path separators, no '..')")


def check_config(config: Mapping[str, Any]) -> None:
    """All checks of the module docstring on a resolved, plain config."""
    from d5pipe.plan.recipes import validate_acceptance

    check_fields(D5Config, config, "")
    check_name(config.get("name"))
    check_stages(config)
    check_resources(config.get("executor") or {})
    check_sweep(config)
    validate_acceptance(list((config.get("recipe") or {}).get("acceptance") or []))
