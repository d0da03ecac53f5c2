"""Small pandas helpers shared by the report sections: axes, metric frames, formatting."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from d5pipe.results.columns import FIXED_COLUMNS

MAX_TABLE_ROWS = 200


def stage_axes(rows: pd.DataFrame) -> list[str]:
    """Axis columns that have a value for at least one row of ``rows``."""
    return [c for c in rows.columns if c not in FIXED_COLUMNS and rows[c].notna().any()]


def points_of(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per point (the first row of each point)."""
    return rows.drop_duplicates("point_id")


def varying_axes(rows: pd.DataFrame) -> list[str]:
    pts = points_of(rows)
    return [c for c in stage_axes(rows) if pts[c].astype(str).nunique(dropna=False) > 1]


def is_numeric_axis(values: pd.Series) -> bool:
    v = values.dropna()
    return len(v) > 0 and pd.api.types.is_numeric_dtype(v) and not pd.api.types.is_bool_dtype(v)


def metric_names(rows: pd.DataFrame) -> list[str]:
    ok = rows[(rows["status"] == "ok") & (rows["metric"] != "status")]
    return list(dict.fromkeys(ok["metric"]))


def find_metric(rows: pd.DataFrame, candidates: Sequence[str], prefix: str = "") -> str | None:
    """The first of ``candidates`` present in ``rows``, else the first metric starting with ``prefix``."""
    names = metric_names(rows)
    for c in candidates:
        if c in names:
            return c
    if prefix:
        return next((n for n in names if n.startswith(prefix)), None)
    return None


def pick(options: Iterable[str], available: Sequence[str]) -> str | None:
    return next((o for o in options if o in available), None)


def label_of(row: pd.Series, axes: Sequence[str]) -> str:
    fallback = row["point_id"] if "point_id" in row.index else row.name
    return ", ".join(f"{a.rsplit('.', 1)[-1]}={fmt_plain(row[a])}" for a in axes) or str(fallback)


def fmt_plain(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{int(v)}" if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    return str(v)


def fmt_value(value: Any, ci_low: Any = None, ci_high: Any = None, unit: str = "", text: Any = None) -> str:
    """``1.23e-05 [1.2e-05, 1.3e-05] s`` or the text value."""
    if isinstance(text, str) and text and (value is None or pd.isna(value)):
        return text
    if value is None or pd.isna(value):
        return ""
    out = f"{float(value):.4g}"
    if ci_low is not None and ci_high is not None and not pd.isna(ci_low) and not pd.isna(ci_high):
        out += f" [{float(ci_low):.4g}, {float(ci_high):.4g}]"
    return f"{out} {unit}".strip()


def metric_frame(
    rows: pd.DataFrame, metric: str, x: str, series: Sequence[str], facets: Sequence[str]
) -> pd.DataFrame:
    """ok rows of ``metric`` as (x, value, ci_low, ci_high, series, facet) for plots.py."""
    m = rows[(rows["metric"] == metric) & (rows["status"] == "ok") & rows["value"].notna()]
    m = m[m[x].notna()] if x in m.columns else m
    if m.empty:
        return pd.DataFrame(columns=["x", "value", "ci_low", "ci_high", "series", "facet"])

    def join(cols: Sequence[str]) -> pd.Series:
        if not cols:
            return pd.Series([""] * len(m), index=m.index)
        return m[list(cols)].apply(lambda r: ", ".join(f"{c.rsplit('.', 1)[-1]}={fmt_plain(r[c])}"
                                                        for c in cols), axis=1)

    return pd.DataFrame({
        "x": m[x] if x in m.columns else m["point_id"],
        "value": m["value"].astype(float),
        "ci_low": m["ci_low"].astype(float),
        "ci_high": m["ci_high"].astype(float),
        "series": join(series) if series else pd.Series([metric] * len(m), index=m.index),
        "facet": join(facets),
    })


def choose_layout(
    rows: pd.DataFrame, prefer_x: Sequence[str], prefer_series: Sequence[str]
) -> tuple[str, bool, list[str], list[str]]:
    """(x axis, x is numeric, series axes, facet axes) for a stage's plots.

    x: the first preferred axis that varies, else the first varying numeric axis, else the first
    varying axis, else ``point_id``. Series: the preferred categorical axis; the remaining varying
    axes become panels.
    """
    vary = varying_axes(rows)
    x = pick(prefer_x, vary)
    if x is None:
        x = next((a for a in vary if is_numeric_axis(rows[a])), None) or (vary[0] if vary else "point_id")
    numeric = x != "point_id" and is_numeric_axis(rows[x])
    rest = [a for a in vary if a != x]
    series = [s for s in [pick(prefer_series, rest) or next(iter(rest), None)] if s]
    facets = [a for a in rest if a not in series]
    return x, numeric, series, facets


def wide_table(rows: pd.DataFrame, metrics: Sequence[str], axes: Sequence[str]) -> tuple[list[str], list[list[str]], int]:
    """One row per ok point: axes then ``value [ci] unit`` per metric. Returns (cols, rows, total)."""
    ok = rows[(rows["status"] == "ok") & rows["metric"].isin(list(metrics))]
    pts = list(dict.fromkeys(ok["point_id"]))
    total = len(pts)
    keep = set(pts[:MAX_TABLE_ROWS])
    ok = ok[ok["point_id"].isin(keep)]
    cells: dict[str, dict[str, str]] = {}
    first: dict[str, pd.Series] = {}
    for r in ok.itertuples(index=False):
        d = r._asdict()
        cells.setdefault(d["point_id"], {})[d["metric"]] = fmt_value(d["value"], d["ci_low"], d["ci_high"],
                                                                     d["unit"], d["text"])
    for _, r in points_of(ok).iterrows():
        first[r["point_id"]] = r
    out = [[fmt_plain(first[p][a]) for a in axes] + [cells[p].get(m, "") for m in metrics]
           for p in pts[:MAX_TABLE_ROWS]]
    return ["point_id", *axes, *metrics], [[p, *row] for p, row in zip(pts, out)], total
