"""Per-level report sections (L0 operators, L1 network, L2 training, L3 distributed).

Each section shows what exists in the results: a missing metric or axis drops its figure or table,
never the section.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from d5pipe.core.stages import STAGES
from d5pipe.results.report import plots
from d5pipe.results.report.answers import answer_blocks
from d5pipe.results.report.blocks import Block, Figure, Section, Table, Text
from d5pipe.results.report.comparison_section import comparison_blocks
from d5pipe.results.report.figures import figure, verdict_table
from d5pipe.results.report.frames import (
    choose_layout,
    find_metric,
    fmt_plain,
    fmt_value,
    label_of,
    metric_names,
    natural_order,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.verdict_sections import level_notes

TIMING_CAUSES = ("high_variation", "target_missed", "oversubscribed", "several_environments")
"""Warnings shown under a level's time figure (all causes are also in the Warnings section)."""


def _names_metric(details: list[str], metric: str) -> bool:
    """True when a warning detail names ``metric`` (``fwd_bwd_time: ...`` or the prefix ``fwd_bwd: ...``)."""
    for d in details:
        for part in d.split("; "):
            head = part.split(":", 1)[0].strip()
            if head and ":" in part and (head == metric or metric.startswith(head + "_")):
                return True
    return False


def _finish(data: RunData, stage: str, blocks: list[Block], notes_at: int | None = None,
            causes: tuple[str, ...] | None = None) -> Section:
    """The level section: each warning line right after the figure of the metric it names, else after
    block ``notes_at`` (default: the first figure); then the side-by-side comparison of the level."""
    if notes_at is None:
        notes_at = next((i + 1 for i, b in enumerate(blocks) if isinstance(b, Figure)), len(blocks))
    placed: list[tuple[int, int, Block]] = []
    for n, (note, details) in enumerate(level_notes(data, stage, causes)):
        at = next((i + 1 for i, b in enumerate(blocks) if isinstance(b, Figure)
                   and _names_metric(details, b.alt.split(" vs ", 1)[0])), notes_at)
        placed.append((at, n, note))
    for at, _, block in sorted(placed, key=lambda p: (-p[0], -p[1])):  # from the end: indices stay valid
        blocks.insert(at, block)
    extra, sub = comparison_blocks(data, stage)
    section = Section(stage, STAGES[stage].title)
    if sub is not None:  # the answer first: each variant against its baseline
        section.subsections.append(sub)
    folded = answer_blocks(data.stage_rows(stage))
    if folded:
        section.subsections.append(Section(f"configurations-{stage}", f"{stage}: configurations", folded))
    section.subsections.append(Section(f"detail-{stage}", f"{stage}: figures and checks", blocks + extra))
    return section


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


def level0(data: RunData) -> Section:
    rows = data.stage_rows("level0")
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
                blocks.append(Figure(plots.roofline(frame, flop_roofs, bw_roofs), "roofline",
                                     "Roofline: achieved GFLOP/s vs arithmetic intensity; dashed: the FLOP "
                                     "ceiling of each dtype, dotted: the bandwidth of each memory level "
                                     "(d5pipe peaks prints them)."))
            else:  # one marker and no roof to read it against
                blocks.append(Text("Roofline: a single point and no measured peak, so no figure; its GFLOP/s "
                                   "is in the table.", "note"))
    checks = [n for n in names if n in ("correct", "correctness", "gradcheck", "backward_correct")
              or rows.loc[rows["metric"] == n, "kind"].eq("verdict").any() or "err" in n]
    if checks:
        blocks += verdict_table(data, "level0", rows, checks, varying_axes(rows, repeat=True),
                                "Correctness vs the float64 reference")
    return _finish(data, "level0", blocks)


def level1(data: RunData) -> Section:
    rows = data.stage_rows("level1")
    batch_axes = [a for a in varying_axes(rows) if "batch" in a]
    layout = choose_layout(rows, batch_axes, ["level1.runtime", "level1.impl", "model.name", "level1.mode"])
    info = set(rows.loc[rows["kind"] == "info", "metric"]) if "kind" in rows.columns else set()
    names = [n for n in metric_names(rows) if n not in info]  # no plots of cv, n_samples, ...
    blocks: list[Block] = []
    timed = [n for n in names if "latency" in n or n.endswith("_time")]
    picked = [n for n in names if "throughput" in n] + timed
    notes_at = None
    for metric in picked:
        blocks += figure(rows, metric, layout)
        if notes_at is None and metric in timed:
            notes_at = len(blocks)  # variation / CI-target notes under the first time figure
    blocks += upper_bounds(rows, [("inference_throughput", "_inference"), ("train_throughput", "_fwd_bwd")])
    return _finish(data, "level1", blocks, notes_at)


def upper_bounds(rows: pd.DataFrame, modes: Sequence[tuple[str, str]]) -> list[Block]:
    """A table of the counted FLOPs per sample, the achieved GFLOP/s and the share of the measured
    peak, next to the throughput they derive from; ``modes`` are ``(throughput metric, suffix)``."""
    present = set(metric_names(rows))
    metrics = [m for rate, sfx in modes
               for m in (rate, f"flops_per_sample{sfx}", f"gflops{sfx}", f"pct_peak_flops{sfx}") if m in present]
    if not any(m.startswith("flops_per_sample") for m in metrics):
        return []
    cols, body, total = wide_table(rows, [*metrics, *(["peak_gflops"] if "peak_gflops" in present else [])],
                                   varying_axes(rows, repeat=True))
    more = f" (first {len(body)} of {total} points)" if total > len(body) else ""
    return [Table(cols, body, "Upper bounds: model FLOPs per sample (counted with FlopCounterMode: matmul, "
                  "convolution, attention; elementwise work not counted, so these are lower bounds), achieved "
                  f"GFLOP/s and % of the measured matmul peak{more}")]


def level2(data: RunData) -> Section:
    rows = data.stage_rows("level2")
    blocks: list[Block] = []
    curves = data.curves[data.curves["stage"] == "level2"]
    if not curves.empty:
        axes = varying_axes(rows, repeat=True)
        pts = rows.drop_duplicates("point_id").set_index("point_id")
        labels = {p: label_of(pts.loc[p], axes) if p in pts.index else p
                  for p in natural_order(rows, axes) if p in set(curves["point_id"])}
        labels.update({p: p for p in curves["point_id"].unique() if p not in labels})
        frame = curves.assign(label=curves["point_id"].map(labels))
        names = [s for s in ("train_loss", "test_accuracy") if s in set(frame["series"])]
        names += [s for s in dict.fromkeys(frame["series"]) if s not in names]
        blocks.append(Figure(plots.curves(frame, names[:6]), "training curves",
                             "Loss and accuracy per epoch, one line per point."))
    tta = [n for n in metric_names(rows) if n.startswith("time_to")]
    if tta:
        cols, body, _ = wide_table(rows, tta, varying_axes(rows, repeat=True))
        tta_rows = rows[rows["metric"].isin(tta) & (rows["status"] == "ok")]
        has_ci = bool(tta_rows["ci_low"].notna().any() and tta_rows["ci_high"].notna().any())
        caption = ("Time to target accuracy (median [95% CI])" if has_ci else
                   "Time to target accuracy (one training run per point: a single value, no CI)")
        blocks.append(Table(cols, body, caption))
    blocks += repetition_outcomes(rows, ("test_accuracy", "train_loss", "test_loss", "time_to_target_s"))
    names = metric_names(rows)
    checks: list[str] = [n for n in ("optimizer_check", "optimizer_divergence") if n in names]
    checks += [n for n in names if n.startswith("sanity:")]
    if checks:
        section = data.config.get("train")
        train: dict[str, Any] = section if isinstance(section, dict) else {}
        blocks += verdict_table(
            data, "level2", rows, checks, varying_axes(rows, repeat=True),
            "Checks of the training: the optimizer against train.reference_optimizer "
            f"({train.get('reference_optimizer') or 'none'}) after the same steps from the same weights, "
            "divergence ||p - p_ref|| / ||p_ref - p_0|| against train.reference_tolerance = "
            f"{train.get('reference_tolerance', '?')}; reference-free sanity checks (finite, not diverged, "
            "above chance) have a column only where one failed")
    acc = [n for n in metric_names(rows) if n.startswith("acceptance:")]
    if acc:
        blocks += verdict_table(data, "level2", rows, acc, varying_axes(rows, repeat=True), "Acceptance thresholds of the recipe")
    blocks += upper_bounds(rows, [("samples_per_s", "")])
    return _finish(data, "level2", blocks)


def repetition_outcomes(rows: pd.DataFrame, metrics: Sequence[str]) -> list[Block]:
    """Per configuration, each outcome over its repetitions (axis ``repeat``): mean [95% t-CI], and
    "not reached" said as such (d5pipe.results.repetition_mean). Nothing without repetitions."""
    from d5pipe.plan.point_config import REPEAT_AXIS
    from d5pipe.results.repetition_mean import repetition_mean

    ok = rows[(rows["status"] == "ok") & rows["metric"].isin(list(metrics))]
    if ok.empty or REPEAT_AXIS not in ok.columns or ok[REPEAT_AXIS].nunique() < 2:
        return []
    axes = [a for a in varying_axes(rows, repeat=True) if a != REPEAT_AXIS]
    present = [m for m in metrics if m in set(ok["metric"])]
    keys = [ok[a].map(fmt_plain) for a in axes] if axes else [pd.Series("", index=ok.index)]
    body = []
    for key, group in ok.groupby(keys, sort=False):
        label = ", ".join(f"{a}={v}" for a, v in zip(axes, key if isinstance(key, tuple) else (key,))) or "-"
        n = group["point_id"].nunique()
        cells = [repetition_mean(list(group.loc[group["metric"] == m, "value"])).text() for m in present]
        body.append([label, str(n), *cells])
    return [Table(["configuration", "repetitions", *present], body,
                  "Outcomes over the repetitions of each configuration: mean [95% t-interval]; a repetition "
                  "that never reached a value (time to target) is counted, not averaged", wrap={0})]


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
        blocks += figure(rows, time_m, layout, band=True)
    notes_at = None
    if "speedup" in names:
        blocks += figure(rows, "speedup", layout, band=True, ideal="linear")
        notes_at = len(blocks)  # superlinear speedup, oversubscription: right under the speedup figure
    if "efficiency" in names:
        blocks += figure(rows, "efficiency", layout, band=True, ideal="one")
    if "speedup" in names:  # the figures' values as a table
        scaled = rows[rows["point_id"].astype(str).str.startswith("scaling-")
                      | rows["metric"].isin(["speedup", "efficiency"])]
        metrics = [m for m in ("speedup", "efficiency") if m in names]
        axes = [a for a in ("distributed.backend", "distributed.scaling", *varying_axes(scaled, repeat=True))
                if a in scaled.columns and scaled[a].notna().any()]
        cols, body, _ = wide_table(scaled, metrics, list(dict.fromkeys(axes)))
        blocks.append(Table(cols[1:], [r[1:] for r in body],
                            "Speedup and efficiency against the 1-rank point of the same configuration "
                            "(value [95% CI]), as in the figures above"))
    busbw = find_metric(rows, ["busbw_GBps", "busbw"], prefix="busbw")
    if busbw:
        bw_layout = choose_layout(rows, ["distributed.message_bytes"], ["distributed.backend"])
        blocks += figure(rows, busbw, bw_layout, title="bus bandwidth")
    blocks += upper_bounds(rows[~rows["point_id"].astype(str).str.startswith("scaling-")], [("samples_per_s", "")])
    return _finish(data, "level3", blocks, notes_at)

