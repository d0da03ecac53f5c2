"""The level-0 section: times, GFLOP/s and % of peak against the size, the roofline, correctness."""

from __future__ import annotations

import numpy as np
import pandas as pd

from d5pipe.levels.level0.stage import LEVEL
from d5pipe.results.report.blocks import Block, Figure, Section, Text
from d5pipe.results.report.figures import figure, verdict_table
from d5pipe.results.report.frames import (
    choose_layout,
    find_metric,
    label_of,
    metric_names,
    varying_axes,
)
from d5pipe.results.report.levels.common import finish
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.plots import roofline


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


def _roofs(rows: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
    """(FLOP ceiling per dtype, bandwidth per memory level) the points were bounded by; results
    without per-point levels fall back to one roof each (the median recorded peak)."""
    ok = rows[rows["status"] == "ok"]
    flop: dict[str, float] = {}
    peaks = ok[ok["metric"] == "peak_gflops"].dropna(subset=["value"])
    if "operators.dtype" in ok.columns and not peaks.empty:
        for dtype, group in peaks.groupby(peaks["operators.dtype"].astype(str)):
            flop[f"{dtype} compute"] = float(group["value"].max())
    elif (f := _peak(rows, "peak_gflops", "gflops", "pct_peak_flops")) is not None:
        flop["peak compute"] = f
    bw: dict[str, float] = {}
    levels = ok.loc[ok["metric"] == "memory_level", ["point_id", "text"]].set_index("point_id")["text"]
    gbps = ok[ok["metric"] == "peak_gbps"].dropna(subset=["value"]).set_index("point_id")["value"]
    if len(levels) and len(gbps):
        for pid, level in levels.items():
            if pid in gbps.index:
                bw[f"{level} bandwidth"] = max(bw.get(f"{level} bandwidth", 0.0), float(gbps.loc[pid]))
    elif (b := _peak(rows, "peak_gbps", "gbps", "pct_peak_bw")) is not None:
        bw["bandwidth"] = b
    return flop, bw


def section(data: RunData) -> Section:
    rows = data.stage_rows(LEVEL.name)
    layout = choose_layout(rows, ["operators.size", "operators.n", "operators.batch"],
                           ["operators.impl", "operators.dtype", "operators.op"])
    blocks: list[Block] = []
    time_m = find_metric(rows, ["time", "time_median", "median_time"], prefix="time")
    for metric, logy in ((time_m, True), ("gflops", False), ("pct_peak_flops", False)):
        if metric and metric in metric_names(rows):
            blocks += figure(rows, metric, layout, logy=logy)
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
            flop_roofs, bw_roofs = _roofs(rows)
            if len(w) > 1 or flop_roofs or bw_roofs:
                blocks.append(Figure(roofline(frame, flop_roofs, bw_roofs), "roofline",
                                     "Roofline: achieved GFLOP/s vs arithmetic intensity; dashed: the FLOP "
                                     "ceiling of each dtype, dotted: the bandwidth of each memory level "
                                     "(d5pipe peaks prints them)."))
            else:  # one marker and no roof to read it against
                blocks.append(Text("Roofline: a single point and no measured peak, so no figure; its GFLOP/s "
                                   "is in the table.", "note"))
    checks = [n for n in names if n in ("correct", "correctness", "gradcheck", "backward_correct")
              or rows.loc[rows["metric"] == n, "kind"].eq("verdict").any() or "err" in n]
    if checks:
        blocks += verdict_table(data, LEVEL.name, rows, checks, varying_axes(rows, repeat=True),
                                "Correctness vs the float64 reference")
    return finish(data, LEVEL.name, LEVEL.title, blocks)
