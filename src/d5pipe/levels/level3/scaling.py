"""Scaling arithmetic: ring-allreduce traffic, speedup and parallel efficiency with CIs.

Definitions (base case = the 1-rank point of the same backend and scaling mode; its absolute time is
reported next to every ratio, as Hoefler & Belli ask):

* strong scaling (fixed global batch): ``speedup = T1 / Tn``, ``efficiency = speedup / n``;
* weak scaling (fixed per-rank batch, n times the work): ``speedup = n * T1 / Tn`` (scaled
  speedup), ``efficiency = T1 / Tn``.

CIs are propagated conservatively from the two medians' CIs (interval arithmetic): the speedup's
lower bound is ``T1_low / Tn_high`` and its upper bound ``T1_high / Tn_low`` (times ``n`` for weak
scaling); efficiency bounds follow by dividing by ``n``. No ratio is averaged.
"""

from __future__ import annotations

import math

import pandas as pd

TIME_METRIC = "time_per_step_s"
KEY_COLUMNS: tuple[str, ...] = ("distributed.backend", "distributed.scaling")
KEY_DEFAULTS: tuple[str, ...] = ("unspecified", "strong")
"""Used when a key column is absent (not a sweep axis); ``strong`` is the schema default."""
RANKS_COLUMN = "distributed.ranks"
SIZE_COLUMNS = frozenset({RANKS_COLUMN, "distributed.nodes"})
"""The size of a point: the nodes its ranks span grow with the ranks, so they are not part of the
configuration a base is matched by (a 1-rank base runs on one node)."""


def ring_allreduce_bytes(payload_bytes: float, ranks: int) -> float:
    """Bytes one rank sends in a ring allreduce of ``payload_bytes``: ``2(n-1)/n * payload``."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    return 2.0 * (ranks - 1) / ranks * payload_bytes


def speedup(base_s: float, time_s: float, ranks: int, scaling: str) -> float:
    """Speedup of an ``n``-rank time over the 1-rank base (see module docstring)."""
    if time_s <= 0:
        return math.nan
    return (ranks * base_s / time_s) if scaling == "weak" else base_s / time_s


def _bounds(row: pd.Series) -> tuple[float, float, float]:
    value = float(row["value"])
    lo, hi = (float(b) if b is not None and not pd.isna(b) else value for b in (row.get("ci_low"), row.get("ci_high")))
    return value, lo, hi


def scaling_table(df: pd.DataFrame, metric: str = TIME_METRIC) -> pd.DataFrame:
    """Speedup and efficiency (with CIs) of every level-3 training point against its 1-rank base.

    ``df`` is tidy results (one row per point and metric) with columns ``distributed.backend``,
    ``distributed.ranks``, ``distributed.scaling``, ``metric``, ``value``, ``ci_low``, ``ci_high``
    (``status``, ``stage`` and ``distributed.benchmark`` are honoured when present). Other axis
    columns present in ``df`` (e.g. ``model.name``) are part of the grouping key, so each base
    matches its own configuration; ``distributed.nodes`` is not (:data:`SIZE_COLUMNS`). A missing
    backend/scaling column (not swept) is filled with
    :data:`KEY_DEFAULTS`. Returns one row per (key, ranks); speedup and efficiency are NaN when the
    group has no 1-rank point.
    """
    if RANKS_COLUMN not in df.columns:
        raise ValueError(f"scaling_table needs a {RANKS_COLUMN!r} column (sweep over ranks)")
    rows = df[df["metric"] == metric].copy()
    for col, default in zip(KEY_COLUMNS, KEY_DEFAULTS):
        if col not in rows.columns:  # not swept: the config's single value applies to every row
            rows[col] = default
    if "status" in rows.columns:
        rows = rows[rows["status"] == "ok"]
    if "stage" in rows.columns:
        rows = rows[rows["stage"] == "level3"]
    if "distributed.benchmark" in rows.columns:
        rows = rows[rows["distributed.benchmark"] == "train"]
    axis_cols = [
        c for c in rows.columns
        if "." in c and c not in SIZE_COLUMNS and c not in KEY_COLUMNS and rows[c].notna().any()
        and not c.startswith("distributed.message") and c != "distributed.collective"
    ]
    keys = [*KEY_COLUMNS, *sorted(axis_cols)]
    out: list[dict[str, object]] = []
    if rows.empty:
        return pd.DataFrame(columns=[*keys, "ranks", "time_s", "speedup", "efficiency"])
    for key, group in rows.groupby(keys, dropna=False, sort=True):
        key_t = key if isinstance(key, tuple) else (key,)
        base_rows = group[group[RANKS_COLUMN].astype(int) == 1]
        # no 1-rank point: NaN base, so NaN speedups and efficiencies
        b, b_lo, b_hi = _bounds(base_rows.iloc[0]) if len(base_rows) else (math.nan, math.nan, math.nan)
        scaling = str(key_t[1])
        for _, row in group.sort_values(RANKS_COLUMN).iterrows():
            n = int(row[RANKS_COLUMN])
            t, t_lo, t_hi = _bounds(row)
            rec: dict[str, object] = dict(zip(keys, key_t))
            rec.update(ranks=n, time_s=t, time_ci_low=t_lo, time_ci_high=t_hi)
            if "point_id" in row.index:
                rec["point_id"] = row["point_id"]
            s = speedup(b, t, n, scaling)
            if n == 1:  # the base against itself: exactly 1, no uncertainty
                s_lo = s_hi = s
            else:
                s_lo = speedup(b_lo, t_hi, n, scaling)
                s_hi = speedup(b_hi, t_lo, n, scaling)
            rec.update(base_time_s=b, base_ci_low=b_lo, base_ci_high=b_hi,
                       speedup=s, speedup_ci_low=s_lo, speedup_ci_high=s_hi,
                       efficiency=s / n, efficiency_ci_low=s_lo / n, efficiency_ci_high=s_hi / n)
            out.append(rec)
    return pd.DataFrame(out)


def derive_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """The level's derived rows (d5pipe.levels.stage.Level.derive) from its rows ``df`` of one run:
    each training point's ``speedup`` and ``efficiency`` against the 1-rank point of its
    configuration (CI from both times' CIs), as metrics of the point -- timings (ratios of
    timings), so the report's scaling figures are data in results.parquet too. Nothing when the
    records carry them already or the run does not sweep ranks."""
    empty = df.iloc[:0]
    if df.empty or RANKS_COLUMN not in df.columns or {"speedup", "efficiency"} & set(df["metric"]):
        return empty
    table = scaling_table(df, TIME_METRIC)
    if table.empty or "point_id" not in table.columns:
        return empty
    timed = df[df["metric"] == TIME_METRIC].drop_duplicates("point_id").set_index("point_id")
    new = []
    for metric in ("speedup", "efficiency"):
        t = table.dropna(subset=[metric]).drop_duplicates("point_id").set_index("point_id")
        ids = timed.index.intersection(t.index)
        if ids.empty:
            continue
        rows = timed.loc[ids].copy()
        rows["metric"], rows["value"] = metric, t.loc[ids, metric].astype(float)
        rows["ci_low"], rows["ci_high"] = t.loc[ids, f"{metric}_ci_low"].astype(float), t.loc[ids, f"{metric}_ci_high"].astype(float)
        rows["unit"], rows["kind"], rows["text"] = "", "timing", None  # ratios of timings are timings
        new.append(rows.reset_index())
    return pd.concat(new, ignore_index=True) if new else empty
