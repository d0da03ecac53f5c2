"""Check every value of a composed config before any job starts (``d5pipe plan`` / ``d5pipe run``).

What is checked here, on plain data (no torch, scipy or pandas is imported):

* **structure**: the config re-merged into the structured schema, so keys added with Hydra's
  ``+key=value`` (which Hydra lets past the schema) and wrong types are one-line errors;
* **declared constraints** of every schema field (d5pipe.core.fields: choices, ranges, element
  ranges) for the composed values;
* **stages**: known (d5pipe.levels.registry), at least one, no duplicates;
* **sweep axes**: each names an existing key of a sweepable section and every distinct value has
  the field's type and satisfies its constraints (once per value, not per point); recipe keys
  marked fixed are not swept;
* **acceptance thresholds** and **executor resources** (known stage entries, integer ranges).

Cross-field checks of one point (e.g. a batch divisible by the ranks) are done per point by the
planner through each stage's ``validate`` target (d5pipe.plan.build). Every error is a
:class:`D5PipeError` line naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from d5pipe.config.schema import D5Config
from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import by_closeness, check_fields, is_schema, schema_fields, schema_hints, value_error
from d5pipe.levels.registry import RESOURCE_ENTRIES, STAGE_NAMES, SWEEPABLE_SECTIONS


def section_schema(path: str) -> type | None:
    """The schema class of the section at dotted ``path`` ("" is the root), if it is one."""
    cls: type = D5Config
    for part in [p for p in path.split(".") if p]:
        tp = schema_hints(cls).get(part)
        if tp is None or not is_schema(tp):
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
            f"{', '.join(by_closeness(name, list(schema_fields(cls))))}")


def schema_field(dotted: str) -> tuple[type, str] | None:
    """``(schema class, field name)`` of a dotted config key, or None when there is none."""
    parent, _, name = dotted.rpartition(".")
    cls = section_schema(parent) if "" not in dotted.split(".") else None
    return (cls, name) if cls is not None and name in schema_fields(cls) else None


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
    from d5pipe.config.recipes import check_fixed
    from d5pipe.core.canonical import canonical_json

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
            err = value_error(cls, name, v)
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
    from d5pipe.config.recipes import validate_acceptance

    check_fields(D5Config, config, "", skip=frozenset({"sweep"}))  # the sweep: value by value in check_sweep
    check_name(config.get("name"))
    check_stages(config)
    check_resources(config.get("executor") or {})
    check_sweep(config)
    validate_acceptance(list((config.get("recipe") or {}).get("acceptance") or []))
