"""Small pandas helpers shared by the report sections: axes, metric frames, formatting."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.columns import is_missing, stage_axes
from d5pipe.results.plausibility import PREFIX as PLAUSIBILITY_PREFIX
from d5pipe.results.report.units import natural_key, number, quantity, quantity_ci

MAX_TABLE_ROWS = 200
"""At most this many rows in a table of the report (the rest are in results.parquet)."""


def varying_axes(rows: pd.DataFrame, repeat: bool = False) -> list[str]:
    """Axes whose value differs between the points of ``rows``; the repetition axis only with
    ``repeat`` (figures and answers fold a configuration's repetitions into one value)."""
    pts = rows.drop_duplicates("point_id")
    return [c for c in stage_axes(rows) if pts[c].astype(str).nunique(dropna=False) > 1
            and (repeat or c != REPEAT_AXIS)]


def fold(values: Sequence[float], cis: Sequence[tuple[float, float]], log: bool) -> tuple[float, float, float]:
    """(value, CI low, CI high) of a configuration over its repetitions: the geometric mean
    (``log``: timings) or the mean, with the 95% t-interval across the repetitions; one
    repetition keeps its own CI."""
    import numpy as np
    from scipy import stats

    vals = np.asarray([v for v in values if math.isfinite(v) and (v > 0 or not log)], dtype=float)
    if vals.size == 0:
        return math.nan, math.nan, math.nan
    if vals.size == 1:
        lo, hi = cis[0] if cis else (math.nan, math.nan)
        return float(vals[0]), lo, hi
    x = np.log(vals) if log else vals
    m, sd = float(x.mean()), float(x.std(ddof=1))
    half = float(stats.t.ppf(0.975, x.size - 1)) * sd / math.sqrt(x.size)
    out = (m, m - half, m + half)
    return tuple(math.exp(v) for v in out) if log else out  # type: ignore[return-value]


def folded_cell(g: pd.DataFrame, log: bool) -> str:
    """One metric of a configuration's repetitions as table text: :func:`fold`'s value with its
    unit and ``[low, high]`` (left out when there is no interval, or one no wider than the value)."""
    unit = str(g["unit"].iloc[0])
    v, lo, hi = fold(g["value"].astype(float).tolist(), list(zip(g["ci_low"], g["ci_high"])), log=log)
    return quantity(v, unit) + (f" [{quantity(lo, unit)}, {quantity(hi, unit)}]" if math.isfinite(lo) and hi != lo
                                else "")


def is_numeric_axis(values: pd.Series) -> bool:
    v = values.dropna()
    return len(v) > 0 and pd.api.types.is_numeric_dtype(v) and not pd.api.types.is_bool_dtype(v)


def metric_names(rows: pd.DataFrame) -> list[str]:
    """Metrics of the ok rows, in first-seen order (``status`` and plausibility rows left out)."""
    ok = rows[(rows["status"] == "ok") & (rows["metric"] != "status")]
    ok = ok[~ok["metric"].astype(str).str.startswith(PLAUSIBILITY_PREFIX)]
    return list(dict.fromkeys(ok["metric"]))


def find_metric(rows: pd.DataFrame, candidates: Sequence[str], prefix: str = "") -> str | None:
    """The first of ``candidates`` present in ``rows``, else the first metric starting with ``prefix``."""
    names = metric_names(rows)
    found = pick(candidates, names)
    if found is None and prefix:
        found = next((n for n in names if n.startswith(prefix)), None)
    return found


def pick(options: Iterable[str], available: Sequence[str]) -> str | None:
    return next((o for o in options if o in available), None)


def label_of(row: pd.Series, axes: Sequence[str]) -> str:
    fallback = row["point_id"] if "point_id" in row.index else row.name
    return ", ".join(f"{a.rsplit('.', 1)[-1]}={fmt_plain(row[a])}" for a in axes) or str(fallback)


def fmt_plain(v: Any) -> str:
    """An axis value: integers without ``.0`` (also from a float column), floats with 4 digits."""
    if is_missing(v):
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float | int) or pd.api.types.is_number(v):
        f = float(v)
        return number(f) if not math.isnan(f) else ""
    return str(v)


def fmt_value(value: Any, ci_low: Any = None, ci_high: Any = None, unit: str = "", text: Any = None) -> str:
    """``49.83 [49.1, 50.2] µs`` (SI/binary prefixes, see units.py) or the text value."""
    if isinstance(text, str) and text and is_missing(value):
        return text
    if is_missing(value):
        return ""
    unit = "" if is_missing(unit) else str(unit)
    if is_missing(ci_low) or is_missing(ci_high):
        return quantity(float(value), unit)
    return quantity_ci(float(value), float(ci_low), float(ci_high), unit)


REACHED_METRICS: tuple[str, ...] = ("time_to_", "epochs_to_")
"""Metrics that have no value when a training run never reached its target."""


def fmt_cell(row: dict[str, Any]) -> str:
    """A table cell of one metric row: a check shows its verdict first (``fail (0.622)``)."""
    text = row.get("text")
    unit = "" if is_missing(row.get("unit")) else str(row.get("unit"))
    if row.get("kind") == "verdict" and isinstance(text, str) and text:
        value = row.get("value")
        return text if is_missing(value) else f"{text} ({fmt_value(value, unit=unit)})"
    if str(row.get("metric", "")).startswith(REACHED_METRICS) and is_missing(row.get("value")) \
            and row.get("status") == "ok":
        return "not reached"  # a finished run that never reached its target: said, not a blank cell
    return fmt_value(row.get("value"), row.get("ci_low"), row.get("ci_high"), unit, text)


def natural_order(rows: pd.DataFrame, axes: Sequence[str]) -> list[str]:
    """Point IDs of ``rows`` sorted by their axis values in natural order (64 < 128 < 256)."""
    pts = rows.drop_duplicates("point_id")
    keyed = [(tuple(natural_key(r[a]) for a in axes), natural_key(r["point_id"]), str(r["point_id"]))
             for _, r in pts.iterrows()]
    return [p for *_, p in sorted(keyed)]


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
                                                        for c in cols if not is_missing(r[c])), axis=1)

    frame = pd.DataFrame({
        "x": m[x] if x in m.columns else m["point_id"],
        "value": m["value"].astype(float),
        "ci_low": m["ci_low"].astype(float),
        "ci_high": m["ci_high"].astype(float),
        "series": join(series) if series else pd.Series([metric] * len(m), index=m.index),
        "facet": join(facets),
    })
    if REPEAT_AXIS not in m.columns or m[REPEAT_AXIS].nunique() < 2:
        return frame
    # one marker per configuration: its repetitions folded (geometric mean and t-interval for timings)
    log = bool((m["kind"] == "timing").all()) if "kind" in m.columns else False
    out = []
    for (xv, sv, fv), g in frame.groupby(["x", "series", "facet"], sort=False):
        v, lo, hi = fold(g["value"].tolist(), list(zip(g["ci_low"], g["ci_high"])), log)
        out.append({"x": xv, "value": v, "ci_low": lo, "ci_high": hi, "series": sv, "facet": fv})
    return pd.DataFrame(out, columns=list(frame.columns))


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
    pts = natural_order(ok, axes)
    shown = pts[:MAX_TABLE_ROWS]
    ok = ok[ok["point_id"].isin(set(shown))]
    cells: dict[str, dict[str, str]] = {}
    for r in ok.itertuples(index=False):
        d = r._asdict()
        cells.setdefault(d["point_id"], {})[d["metric"]] = fmt_cell(d)
    first = {r["point_id"]: r for _, r in ok.drop_duplicates("point_id").iterrows()}
    body = [[p, *(fmt_plain(first[p][a]) for a in axes), *(cells[p].get(m, "") for m in metrics)] for p in shown]
    return ["point_id", *axes, *metrics], body, len(pts)
