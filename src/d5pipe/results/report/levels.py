"""Per-level report sections (L0 operators, L1 network, L2 training, L3 distributed).

Each section shows what exists in the results: a missing metric or axis drops its figure or table,
never the section.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from d5pipe.config.stages import STAGES
from d5pipe.results.report import plots
from d5pipe.results.report.blocks import Block, Figure, Section, Table, Text
from d5pipe.results.report.frames import (
    choose_layout,
    find_metric,
    fmt_plain,
    fmt_value,
    label_of,
    metric_frame,
    metric_names,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.loader import RunData


def _unit(rows: pd.DataFrame, metric: str) -> str:
    units = rows.loc[rows["metric"] == metric, "unit"].dropna()
    return str(units.iloc[0]) if len(units) and units.iloc[0] else ""


def _figure(
    rows: pd.DataFrame, metric: str, layout: tuple[str, bool, list[str], list[str]], *,
    band: bool = False, ideal: plots.Ideal = None, logy: bool = False, title: str = "",
) -> list[Block]:
    x, numeric, series, facets = layout
    frame = metric_frame(rows, metric, x, series, facets)
    if frame.empty:
        return []
    xs = frame["x"].astype(float) if numeric else None
    logx = bool(numeric and xs is not None and (xs > 0).all() and xs.max() / xs.min() >= 8)
    unit = _unit(rows, metric)
    png, left_out = plots.metric_vs_axis(
        frame, xlabel=x, ylabel=f"{metric} ({unit})" if unit else metric, numeric_x=numeric,
        logx=logx, logy=logy, band=band, ideal=ideal,
    )
    how = ("lines join the per-x median along the numeric sweep axis" if numeric
           else "markers only: the x axis is categorical")
    caption = f"{title or metric} vs {x}; error bars: 95% CI of the median; {how}."
    if ideal:
        caption += " Dashed: ideal."
    blocks: list[Block] = [Figure(png, f"{metric} vs {x}", caption)]
    if left_out:
        blocks.append(Text(f"{left_out} more panel(s) of {metric} not drawn; see results.parquet.", "note"))
    return blocks


def _verdict_table(rows: pd.DataFrame, metrics: Sequence[str], axes: Sequence[str], caption: str) -> list[Block]:
    """Points x verdict metrics, failing points first."""
    cols, body, total = wide_table(rows, metrics, axes)
    if not body:
        return []
    failing = [any(cell.strip().lower() in ("fail", "false") for cell in r) for r in body]
    order = sorted(range(len(body)), key=lambda i: not failing[i])
    body = [body[i] for i in order]
    bad = {j for j, i in enumerate(order) if failing[i]}
    blocks: list[Block] = [Table(cols, body, caption, bad)]
    n_fail = sum(failing)
    blocks.insert(0, Text(f"{n_fail} of {total} point(s) fail a check." if n_fail else
                          f"All {total} point(s) pass.", "bad" if n_fail else "good"))
    return blocks


def _peak(rows: pd.DataFrame, direct: str, achieved: str, pct: str) -> float | None:
    """Measured peak: the recorded ``direct`` metric, else achieved / (pct / 100)."""
    ok = rows[rows["status"] == "ok"]
    d = ok.loc[ok["metric"] == direct, "value"].dropna()
    if len(d):
        return float(d.median())
    w = ok[ok["metric"].isin([achieved, pct])].pivot_table(index="point_id", columns="metric", values="value")
    if achieved in w and pct in w:
        est = (w[achieved] / (w[pct] / 100.0)).replace([np.inf, -np.inf], np.nan).dropna()
        return float(est.median()) if len(est) else None
    return None


def level0(data: RunData) -> Section:
    rows = data.stage_rows("level0")
    layout = choose_layout(rows, ["operators.size", "operators.n", "operators.batch"],
                           ["operators.impl", "operators.dtype", "operators.op"])
    blocks: list[Block] = []
    time_m = find_metric(rows, ["time", "time_median", "median_time"], prefix="time")
    for metric, logy in ((time_m, True), ("gflops", False), ("pct_peak_flops", False)):
        if metric and metric in metric_names(rows):
            blocks += _figure(rows, metric, layout, logy=logy)
    names = metric_names(rows)
    if {"flops", "bytes", "gflops"} <= set(names):
        ok = rows[rows["status"] == "ok"]
        w = ok[ok["metric"].isin(["flops", "bytes", "gflops"])].pivot_table(
            index="point_id", columns="metric", values="value").dropna()
        w = w[(w["bytes"] > 0) & (w["gflops"] > 0)]
        if len(w):
            series_axes = layout[2]
            pts = rows.drop_duplicates("point_id").set_index("point_id")
            frame = pd.DataFrame({
                "ai": w["flops"] / w["bytes"], "gflops": w["gflops"],
                "series": [label_of(pts.loc[p], series_axes) if series_axes else "points" for p in w.index],
            })
            peak_f = _peak(rows, "peak_gflops", "gflops", "pct_peak_flops")
            peak_b = _peak(rows, "peak_gbps", "gbps", "pct_peak_bw")
            blocks.append(Figure(plots.roofline(frame, peak_f, peak_b), "roofline",
                                 "Roofline: achieved GFLOP/s vs arithmetic intensity; dashed/dotted: the "
                                 "machine's measured peak compute and bandwidth."))
    checks = [n for n in names if n in ("correct", "correctness", "gradcheck", "backward_correct")
              or rows.loc[rows["metric"] == n, "kind"].eq("verdict").any() or "err" in n]
    if checks:
        blocks += _verdict_table(rows, checks, varying_axes(rows), "Correctness vs the float64 reference")
    return Section("level0", STAGES["level0"].title, blocks)


def level1(data: RunData) -> Section:
    rows = data.stage_rows("level1")
    batch_axes = [a for a in varying_axes(rows) if "batch" in a]
    layout = choose_layout(rows, batch_axes, ["model.name", "level1.mode"])
    info = set(rows.loc[rows["kind"] == "info", "metric"]) if "kind" in rows.columns else set()
    names = [n for n in metric_names(rows) if n not in info]  # no plots of cv, n_samples, ...
    blocks: list[Block] = []
    picked = [n for n in names if "throughput" in n] + [n for n in names if "latency" in n or n.endswith("_time")]
    for metric in picked:
        blocks += _figure(rows, metric, layout)
    return Section("level1", STAGES["level1"].title, blocks)


def level2(data: RunData) -> Section:
    rows = data.stage_rows("level2")
    blocks: list[Block] = []
    curves = data.curves[data.curves["stage"] == "level2"]
    if not curves.empty:
        axes = varying_axes(rows)
        pts = rows.drop_duplicates("point_id").set_index("point_id")
        labels = {p: label_of(pts.loc[p], axes) if p in pts.index else p for p in curves["point_id"].unique()}
        frame = curves.assign(label=curves["point_id"].map(labels))
        names = [s for s in ("train_loss", "test_accuracy") if s in set(frame["series"])]
        names += [s for s in dict.fromkeys(frame["series"]) if s not in names]
        blocks.append(Figure(plots.curves(frame, names[:6]), "training curves",
                             "Loss and accuracy per epoch, one line per point."))
    tta = [n for n in metric_names(rows) if n.startswith("time_to")]
    if tta:
        cols, body, total = wide_table(rows, tta, varying_axes(rows))
        blocks.append(Table(cols, body, "Time to target accuracy (median [95% CI])"))
    acc = [n for n in metric_names(rows) if n.startswith("acceptance:")]
    if acc:
        blocks += _verdict_table(rows, acc, varying_axes(rows), "Acceptance thresholds of the recipe")
    return Section("level2", STAGES["level2"].title, blocks)


def _base_case(rows: pd.DataFrame, metric: str, x: str, groups: list[str]) -> Text | None:
    """The speedup base case (smallest x) and its absolute time, per series."""
    m = rows[(rows["metric"] == metric) & (rows["status"] == "ok") & rows["value"].notna()]
    if m.empty or x not in m:
        return None
    base = m[m[x] == m[x].min()]
    parts = [f"{label_of(r, groups) if groups else 'all'}: {fmt_value(r['value'], r['ci_low'], r['ci_high'], r['unit'])}"
             for _, r in base.head(12).iterrows()]
    return Text(f"Speedup base case {x}={fmt_plain(m[x].min())}, {metric}: " + "; ".join(parts), "note")


def _with_scaling(rows: pd.DataFrame, time_metric: str, config: dict[str, Any]) -> pd.DataFrame:
    """Add ``speedup``/``efficiency`` rows computed by d5pipe.levels.level3.scaling when the records
    do not carry them (they are cross-point quantities: each point against its 1-rank base)."""
    names = set(metric_names(rows))
    if {"speedup", "efficiency"} <= names or "distributed.ranks" not in rows.columns:
        return rows
    try:
        from d5pipe.levels.level3.scaling import scaling_table
    except ImportError:
        return rows
    section = config.get("distributed")
    dist: dict[str, Any] = section if isinstance(section, dict) else {}
    for column, default in (("distributed.backend", dist.get("backend", "")),
                            ("distributed.scaling", dist.get("scaling", "strong"))):
        if column not in rows.columns or rows[column].isna().all():  # not a sweep axis
            rows = rows.assign(**{column: default})
    table = scaling_table(rows, time_metric).rename(columns={"ranks": "distributed.ranks"})
    if table.empty:
        return rows
    extra = []
    for metric in ("speedup", "efficiency"):
        part = table.assign(
            metric=metric, value=table[metric], ci_low=table[f"{metric}_ci_low"],
            ci_high=table[f"{metric}_ci_high"], unit="", kind="numerical", text=None, status="ok",
            stage="level3", point_id=[f"scaling-{i}" for i in range(len(table))],
        )
        extra.append(part[[c for c in part.columns if c in rows.columns]])
    return pd.concat([rows, *extra], ignore_index=True)


def level3(data: RunData) -> Section:
    rows = data.stage_rows("level3")
    blocks: list[Block] = []
    time_m = find_metric(rows, ["time_per_step_s", "time_per_step"], prefix="time_per_step")
    if time_m:
        rows = _with_scaling(rows, time_m, data.config)
    names = metric_names(rows)
    # ranks on x, one series per backend; other varying axes (e.g. message size) become panels
    layout = choose_layout(rows, ["distributed.ranks"], ["distributed.backend"])
    if time_m:
        base = _base_case(rows, time_m, layout[0], layout[2] + layout[3])
        if base is not None:
            blocks.append(base)
        blocks += _figure(rows, time_m, layout, band=True)
    if "speedup" in names:
        blocks += _figure(rows, "speedup", layout, band=True, ideal="linear")
    if "efficiency" in names:
        blocks += _figure(rows, "efficiency", layout, band=True, ideal="one")
    busbw = find_metric(rows, ["busbw_GBps", "busbw"], prefix="busbw")
    if busbw:
        bw_layout = choose_layout(rows, ["distributed.message_bytes"], ["distributed.backend"])
        blocks += _figure(rows, busbw, bw_layout, title="bus bandwidth")
    return Section("level3", STAGES["level3"].title, blocks)

