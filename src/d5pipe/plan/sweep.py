"""Sweep expansion: pure functions over plain data (no OmegaConf object per point).

An experiment's ``sweep`` has ``grid`` (cartesian axes), ``zip`` (groups of axes varying together)
and ``exclude`` (partial assignments to drop). Each grid axis and each zip group is one factor of
the cartesian product; points are produced in a deterministic order (factors in declaration order,
the last factor varying fastest).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from d5pipe.core.canonical import canonical_json
from d5pipe.core.errors import D5PipeError


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: ``axes`` in product order; ``factors`` yield value tuples per factor."""

    axes: tuple[str, ...]
    factors: tuple[tuple[tuple[Any, ...], ...], ...]
    """Per factor, its rows; each row holds the values of that factor's axes."""
    excludes: tuple[tuple[tuple[int, Any], ...], ...]
    """Per exclude: (axis index, value) pairs."""


def parse_sweep(sweep: dict[str, Any]) -> Sweep:
    """Validate a plain ``sweep`` mapping; every error is a one-line D5PipeError naming the culprit."""
    grid = sweep.get("grid") or {}
    zips = sweep.get("zip") or []
    excludes = sweep.get("exclude") or []
    axes: list[str] = []
    factors: list[tuple[tuple[Any, ...], ...]] = []

    def add_axis(axis: str, where: str) -> None:
        if axis in axes:
            raise D5PipeError(f"{where}: axis '{axis}' is declared twice in the sweep")
        axes.append(axis)

    for axis, values in grid.items():
        where = f"sweep.grid.{axis}"
        if not isinstance(values, (list, tuple)):
            raise D5PipeError(f"{where}: expected a list of values, got {values!r}")
        if len(values) == 0:
            raise D5PipeError(f"{where}: axis has no values")
        seen: set[str] = set()
        for v in values:
            k = canonical_json(v)
            if k in seen:
                raise D5PipeError(f"{where}: duplicate value {v!r} (would give duplicate points)")
            seen.add(k)
        add_axis(axis, where)
        factors.append(tuple((v,) for v in values))

    for i, group in enumerate(zips):
        where = f"sweep.zip[{i}]"
        if not isinstance(group, dict) or not group:
            raise D5PipeError(f"{where}: expected a non-empty mapping of axis -> list of values")
        lengths = {}
        for axis, values in group.items():
            if not isinstance(values, (list, tuple)):
                raise D5PipeError(f"{where}.{axis}: expected a list of values, got {values!r}")
            if len(values) == 0:
                raise D5PipeError(f"{where}.{axis}: axis has no values")
            lengths[axis] = len(values)
        if len(set(lengths.values())) != 1:
            desc = ", ".join(f"{a}: {n}" for a, n in lengths.items())
            raise D5PipeError(f"{where}: zipped axes have unequal lengths ({desc})")
        names = tuple(group.keys())
        for a in names:
            add_axis(a, where)
        rows = tuple(zip(*(group[a] for a in names)))
        seen_rows: set[str] = set()
        for row in rows:
            k = canonical_json(list(row))
            if k in seen_rows:
                raise D5PipeError(f"{where}: duplicate row {dict(zip(names, row))!r}")
            seen_rows.add(k)
        factors.append(rows)

    index = {a: i for i, a in enumerate(axes)}
    parsed_ex: list[tuple[tuple[int, Any], ...]] = []
    for i, ex in enumerate(excludes):
        where = f"sweep.exclude[{i}]"
        if not isinstance(ex, dict) or not ex:
            raise D5PipeError(f"{where}: expected a non-empty mapping of axis -> value")
        pairs = []
        for axis, value in ex.items():
            if axis not in index:
                known = ", ".join(axes) or "none"
                raise D5PipeError(f"{where}: unknown axis '{axis}' (sweep axes: {known})")
            pairs.append((index[axis], value))
        parsed_ex.append(tuple(pairs))

    return Sweep(tuple(axes), tuple(factors), tuple(parsed_ex))


def iter_points(sweep: Sweep) -> Iterator[tuple[Any, ...]]:
    """Yield each point as a tuple of values aligned with ``sweep.axes``, excludes applied."""
    # Map factor order to axis order: factors are declared in axis order already.
    excludes = [[(i, canonical_json(v)) for i, v in ex] for ex in sweep.excludes]
    excluded_axes = sorted({i for ex in excludes for i, _ in ex})
    for combo in itertools.product(*sweep.factors):
        values: tuple[Any, ...] = tuple(v for row in combo for v in row)
        if excludes:
            keys = {i: canonical_json(values[i]) for i in excluded_axes}
            if any(all(keys[i] == kv for i, kv in ex) for ex in excludes):
                continue
        yield values


def expand(sweep_cfg: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """Expand a sweep config into (axes, points). Raises when everything is excluded."""
    sweep = parse_sweep(sweep_cfg)
    points = list(iter_points(sweep))
    if not points:
        raise D5PipeError("sweep: expands to no points (every point is excluded)")
    return sweep.axes, points


def project(
    axes: Sequence[str], points: Sequence[tuple[Any, ...]], keep: Sequence[str]
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """Restrict points to the axes in ``keep`` (a stage's axes), de-duplicated, order kept."""
    idx = [i for i, a in enumerate(axes) if a in set(keep)]
    sub_axes = tuple(axes[i] for i in idx)
    if len(idx) == len(axes):
        return sub_axes, list(points)
    firsts: dict[str, tuple[Any, ...]] = {}
    for p in points:
        sub = tuple(p[i] for i in idx)
        firsts.setdefault(canonical_json(list(sub)), sub)
    return sub_axes, list(firsts.values())
