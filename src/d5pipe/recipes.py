"""Recipes (after Deep500): FIXED keys a sweep may not vary, and acceptance thresholds.

* :func:`check_fixed` rejects a sweep whose axes touch a fixed key (the same key, a key below it,
  or a section above it: fixing ``train`` fixes ``train.epochs`` and vice versa).
* :func:`evaluate_acceptance` turns thresholds ``{metric, op, value, stage}`` into one verdict row
  per (point of that stage, threshold) on the tidy results frame: metric ``acceptance:<metric>``,
  ``text`` ``pass``/``fail``, ``value`` the observed value (NaN when missing), kind ``verdict``.
  A point that failed, was skipped or lacks the metric fails the threshold; the reason is in
  ``error``. Comparisons are exact (``>=``/``<=`` on the recorded float).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from d5pipe.errors import D5PipeError
from d5pipe.schema.root import STAGES

OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}
VERDICT_PREFIX = "acceptance:"
POINT_COLUMNS_EXCLUDED: frozenset[str] = frozenset(
    {"metric", "value", "text", "unit", "kind", "ci_low", "ci_high", "status", "error"}
)
"""Columns that describe one metric row; every other column describes the point and is copied."""
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
        stage = str(entry.get("stage", "level2"))
        if stage not in STAGES:
            raise D5PipeError(f"{where}.stage: unknown stage {stage!r}; known: {list(STAGES)}")
        checked.append({"metric": str(entry["metric"]), "op": op, "value": value, "stage": stage})
    return checked


def _as_float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def evaluate_acceptance(results: pd.DataFrame, acceptance: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Verdict rows (one per point of the threshold's stage and threshold); see the module docstring."""
    rules = validate_acceptance(acceptance)
    if results.empty:
        return pd.DataFrame(columns=[*results.columns, *(c for c in VERDICT_COLUMNS if c not in results)])
    columns = [*results.columns, *(c for c in VERDICT_COLUMNS if c not in results)]
    for col in ("stage", "point_id", "metric", "status"):
        if col not in results.columns:
            raise D5PipeError(f"results: column '{col}' missing; cannot evaluate recipe.acceptance")
    point_cols = [c for c in results.columns if c not in POINT_COLUMNS_EXCLUDED]
    rows: list[dict[str, Any]] = []
    for rule in rules:
        stage_rows = results[results["stage"] == rule["stage"]]
        compare = OPS[rule["op"]]
        threshold = f"{rule['op']} {rule['value']:g}"
        for point_id, group in stage_rows.groupby("point_id", sort=True):
            base = {c: group.iloc[0][c] for c in point_cols}
            statuses = set(group["status"].astype(str))
            hit = group[group["metric"] == rule["metric"]]
            observed = _as_float(hit.iloc[0]["value"]) if len(hit) else math.nan
            unit = str(hit.iloc[0]["unit"]) if len(hit) and "unit" in hit.columns else ""
            error: str | None = None
            if statuses != {"ok"}:
                error = f"point status {sorted(statuses)}; required {rule['metric']} {threshold}"
                verdict = "fail"
            elif len(hit) == 0:
                error = f"metric {rule['metric']!r} not recorded; required {threshold}"
                verdict = "fail"
            elif math.isnan(observed):
                error = f"{rule['metric']} is NaN; required {threshold}"
                verdict = "fail"
            else:
                verdict = "pass" if compare(observed, rule["value"]) else "fail"
                if verdict == "fail":
                    error = f"{rule['metric']}={observed:g}, required {threshold}"
            rows.append({**base, "point_id": point_id, "stage": rule["stage"],
                         "metric": VERDICT_PREFIX + rule["metric"], "value": observed, "text": verdict,
                         "unit": unit, "kind": "verdict", "status": "ok", "error": error})
    frame = pd.DataFrame(rows, columns=columns)
    return frame
