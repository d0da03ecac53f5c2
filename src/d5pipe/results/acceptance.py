"""Acceptance verdicts: recipe thresholds evaluated on the tidy results (see d5pipe.config.recipes)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from d5pipe.config.recipes import OPS, VERDICT_COLUMNS, VERDICT_PREFIX, validate_acceptance
from d5pipe.core.errors import D5PipeError
from d5pipe.levels.verify import passed
from d5pipe.results.columns import METRIC_COLUMNS


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def evaluate_acceptance(results: pd.DataFrame, acceptance: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Verdict rows (one per point of the threshold's stage and threshold); see the module docstring."""
    rules = validate_acceptance(acceptance)
    columns = [*results.columns, *(c for c in VERDICT_COLUMNS if c not in results)]
    if results.empty:
        return pd.DataFrame(columns=columns)
    for col in ("stage", "point_id", "metric", "status"):
        if col not in results.columns:
            raise D5PipeError(f"results: column '{col}' missing; cannot evaluate recipe.acceptance")
    point_cols = [c for c in results.columns if c not in METRIC_COLUMNS]
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
            elif len(hit) == 0:
                error = f"metric {rule['metric']!r} not recorded; required {threshold}"
            elif math.isnan(observed):
                error = f"{rule['metric']} is NaN; required {threshold}"
            elif not compare(observed, rule["value"]):
                error = f"{rule['metric']}={observed:g}, required {threshold}"
            rows.append({**base, "point_id": point_id, "stage": rule["stage"],
                         "metric": VERDICT_PREFIX + rule["metric"], "value": observed,
                         "text": passed(error is None),
                         "unit": unit, "kind": "verdict", "status": "ok", "error": error})
    return pd.DataFrame(rows, columns=columns)
