"""A level's configurations with their repetitions folded in: the answer before the detail.

One row per configuration (every sweep axis but ``repeat``): how many repetitions it has, each main
timing as the geometric mean of its repetitions with the 95% t-interval across them, and where
its variation arises -- between processes (the spread of the repetitions' values) and within
one (the median half-width of a repetition's own CI), as Kalibera & Jones separate them: when the
first dominates, more repetitions help; when the second does, longer ones. Repetitions left out
of comparisons as outliers are counted.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.plausibility import PREFIX
from d5pipe.results.report.blocks import Block, Table, Text
from d5pipe.results.report.frames import MAX_TABLE_ROWS, fmt_plain, folded_cell, natural_order, varying_axes
from d5pipe.results.report.units import TIME_UNITS

MAX_TIMINGS = 4


def _timings(ok: pd.DataFrame) -> list[str]:
    """The stage's timings measured in seconds (rates derived from them would repeat them)."""
    t = ok[(ok["kind"] == "timing") & ok["unit"].isin(list(TIME_UNITS)) & ok["ci_low"].notna()]
    return list(dict.fromkeys(t["metric"].astype(str)))[:MAX_TIMINGS]


def _spread(g: pd.DataFrame) -> tuple[float, float]:
    """(between: sd of the log values; within: median relative CI half-width) of one timing."""
    v = g["value"].astype(float).to_numpy()
    v = v[np.isfinite(v) & (v > 0)]
    between = float(np.std(np.log(v), ddof=1)) if v.size >= 2 else math.nan
    rel = ((g["ci_high"].astype(float) - g["ci_low"].astype(float)) / 2 / g["value"].astype(float)).dropna()
    return between, float(rel.median()) if len(rel) else math.nan


def answer_blocks(rows: pd.DataFrame) -> list[Block]:
    """The configurations table of a stage's rows; nothing without repetitions or timings."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty or REPEAT_AXIS not in ok.columns or ok[REPEAT_AXIS].nunique() < 2:
        return []
    metrics = _timings(ok)
    if not metrics:
        return []
    axes = varying_axes(ok)
    keys = [ok[a].map(fmt_plain) for a in axes] if axes else [pd.Series("", index=ok.index)]
    outliers = set(ok.loc[ok["metric"] == PREFIX + "outlier_repetition", "point_id"].astype(str))
    order = {p: i for i, p in enumerate(natural_order(ok, axes))}
    body: list[tuple[int, list[str]]] = []
    for key, group in ok.groupby(keys, sort=False):
        label = list(key) if isinstance(key, tuple) else [key]
        pids = set(group["point_id"].astype(str))
        cells = []
        spread = ""
        for m in metrics:
            g = group[group["metric"] == m]
            if g.empty:
                cells.append("")
                continue
            cells.append(folded_cell(g, log=True))
            if not spread:
                between, within = _spread(g)
                spread = f"{100 * between:.1f}% / {100 * within:.1f}%" if math.isfinite(between) else "-"
        n_out = len(pids & outliers)
        first = min(order.get(p, 0) for p in pids)
        body.append((first, [*label[:len(axes)], str(len(pids)), *cells, spread,
                             str(n_out) if n_out else ""]))
    body.sort(key=lambda r: r[0])
    cols = [*(a.rsplit(".", 1)[-1] for a in axes), "repetitions", *metrics,
            f"spread of {metrics[0]}: between / within processes", "outlier repetitions"]
    table = Table(cols, [r for _, r in body[:MAX_TABLE_ROWS]],
                  "Each configuration over its repetitions (separate processes): geometric mean [95% t-interval "
                  "across repetitions]; spread between processes (standard deviation of the log values) and "
                  "within one (median half-width of a repetition's 95% CI of the median)")
    blocks: list[Block] = [table]
    if len(body) > MAX_TABLE_ROWS:
        blocks.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(body)} configurations.", "note"))
    return blocks
