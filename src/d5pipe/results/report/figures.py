"""Blocks the level sections share: a metric-vs-axis figure and a check (verdict) table."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from d5pipe.results.report.blocks import Block, Figure, Table, Text
from d5pipe.results.report.frames import metric_frame, wide_table
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.plots import Ideal, metric_vs_axis

Layout = tuple[str, bool, list[str], list[str]]
"""(x axis, x is numeric, series axes, facet axes) from frames.choose_layout."""


def unit_of(rows: pd.DataFrame, metric: str) -> str:
    units = rows.loc[rows["metric"] == metric, "unit"].dropna()
    return str(units.iloc[0]) if len(units) and units.iloc[0] else ""


def figure(
    rows: pd.DataFrame, metric: str, layout: Layout, *,
    band: bool = False, ideal: Ideal = None, logy: bool = False, title: str = "",
) -> list[Block]:
    """``metric`` against the layout's x axis, error bars from the recorded 95% CIs."""
    x, numeric, series, facets = layout
    frame = metric_frame(rows, metric, x, series, facets)
    if frame.empty:
        return []
    if not numeric and len(frame) == 1:  # one marker over one category compares nothing
        return [Text(f"{title or metric}: a single point, so no figure; its value and CI are in the table.",
                     "note")]
    xs = frame["x"].astype(float) if numeric else None
    logx = bool(numeric and xs is not None and (xs > 0).all() and xs.max() / xs.min() >= 8)
    png, left_out = metric_vs_axis(
        frame, xlabel=x, ylabel=metric, numeric_x=numeric, logx=logx, logy=logy, band=band, ideal=ideal,
        unit=unit_of(rows, metric),
    )
    how = ("lines join the per-x median along the numeric sweep axis" if numeric
           else "markers only: the x axis is categorical")
    has_ci = bool(frame["ci_low"].notna().any())
    bars = "error bars: 95% CI of the median" if has_ci else "no CI recorded"
    caption = f"{title or metric} vs {x}; {bars}; {how}."
    if ideal:
        caption += " Dashed: ideal."
    blocks: list[Block] = [Figure(png, f"{metric} vs {x}", caption)]
    if left_out:
        blocks.append(Text(f"{left_out} more panel(s) of {metric} not drawn; see results.parquet.", "note"))
    return blocks


def verdict_table(data: RunData, stage: str, rows: pd.DataFrame, metrics: Sequence[str],
                  axes: Sequence[str], caption: str) -> list[Block]:
    """Points x check metrics plus each point's verdict, failing points first.

    The sentence above the table counts the stage's points by **verdict** (a point can fail for a
    check outside this table, or crash); it is green only when no point of the run failed.
    """
    cols, body, _ = wide_table(rows, metrics, axes)
    if not body:
        return []
    v = data.res.verdicts[data.res.verdicts["stage"] == stage]
    verdict = dict(zip(v["point_id"].astype(str), v["verdict"].astype(str)))
    body = [[*r, verdict.get(str(r[0]), "")] for r in body]
    cols = [*cols, "verdict"]
    first_metric = 1 + len(axes)  # point_id, axes, metrics..., verdict
    failing = [r[-1] == "fail" or any(str(c).strip().lower().startswith(("fail", "false"))
                                      for c in r[first_metric:-1]) for r in body]
    order = sorted(range(len(body)), key=lambda i: not failing[i])
    body = [body[i] for i in order]
    bad = {j for j, i in enumerate(order) if failing[i]}
    n_fail = int((v["verdict"] == "fail").sum())
    run_ok = not (data.res.verdicts["verdict"] == "fail").any()
    n_pass = sum(r[-1] == "pass" for r in body)
    if n_fail:
        line = Text(f"{n_fail} of {len(v)} point(s) of {stage} fail (a check, a crash or never ran); "
                    "see Failures.", "bad")
    else:  # "All ... pass" and the green tone are kept for the Overview of a run without failures
        line = Text(f"No point of {stage} failed: {n_pass} of {len(body)} in this table pass their checks"
                    + ("." if n_pass == len(body) else "; the others have no check."), "good" if run_ok else "plain")
    return [line, Table(cols, body, caption, bad)]
