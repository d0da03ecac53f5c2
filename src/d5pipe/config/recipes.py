"""Recipes (after Deep500): FIXED keys a sweep may not vary, and acceptance thresholds.

* :func:`check_fixed` rejects a sweep whose axes touch a fixed key (the same key, a key below it,
  or a section above it: fixing ``train`` fixes ``train.epochs`` and vice versa).
* :func:`validate_acceptance` checks thresholds before any job; d5pipe.results.acceptance
  evaluates them: :func:`~d5pipe.results.acceptance.evaluate_acceptance` turns thresholds ``{metric, op, value, stage}`` into one verdict row
  per (point of that stage, threshold) on the tidy results frame: metric ``acceptance:<metric>``,
  ``text`` ``pass``/``fail``, ``value`` the observed value (NaN when missing), kind ``verdict``.
  A point that failed, was skipped or lacks the metric fails the threshold; the reason is in
  ``error``. Comparisons are exact (``>=``/``<=`` on the recorded float).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.registry import RECIPE_STAGE
from d5pipe.levels.registry import STAGE_NAMES as STAGES

OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}
VERDICT_PREFIX = "acceptance:"
VERDICT_COLUMNS: tuple[str, ...] = (
    "stage", "point_id", "metric", "value", "text", "unit", "kind", "status", "error",
)


def _overlaps(a: str, b: str) -> bool:
    """True when dotted keys ``a`` and ``b`` are equal or one is a section above the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def check_fixed(fixed_keys: Sequence[str], sweep_axes: Sequence[str]) -> None:
    """Raise D5PipeError naming the first fixed key that a sweep axis varies."""
    for key in fixed_keys:
        for axis in sweep_axes:
            if _overlaps(str(key), str(axis)):
                detail = "" if key == axis else f" (via axis '{axis}')"
                raise D5PipeError(f"recipe.fixed: sweep varies fixed key '{key}'{detail}")


def validate_acceptance(acceptance: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    checked: list[dict[str, Any]] = []
    for i, entry in enumerate(acceptance):
        where = f"recipe.acceptance[{i}]"
        entry = dict(entry)
        for key in ("metric", "value"):
            if entry.get(key) is None:
                raise D5PipeError(f"{where}.{key}: missing")
        op = str(entry.get("op", ">="))
        if op not in OPS:
            raise D5PipeError(f"{where}.op: unknown operator {op!r}; use one of {sorted(OPS)}")
        try:
            value = float(entry["value"])
        except (TypeError, ValueError):
            raise D5PipeError(f"{where}.value: not a number: {entry['value']!r}") from None
        unknown = sorted(set(entry) - {"metric", "op", "value", "stage"})
        if unknown:
            raise D5PipeError(f"{where}: unknown key(s) {unknown}")
        stage = str(entry.get("stage", RECIPE_STAGE))
        if stage not in STAGES:
            raise D5PipeError(f"{where}.stage: unknown stage {stage!r}; known: {list(STAGES)}")
        checked.append({"metric": str(entry["metric"]), "op": op, "value": value, "stage": stage})
    return checked
