"""What the levels' report sections share: placing warning notes, the section's order (the
side-by-side answers, the configurations, then figures and checks), the upper-bounds table,
outcomes over repetitions and what each metric means (the glossary closing every level's section)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from d5pipe.core.outcome import lookup
from d5pipe.levels.registry import STAGES
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.report.answers import answer_blocks
from d5pipe.results.report.blocks import Block, Figure, Section, Table
from d5pipe.results.report.comparison_section import comparison_blocks
from d5pipe.results.report.frames import MAX_TABLE_ROWS, fmt_plain, folded_cell, metric_names, varying_axes, wide_table
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.units import quantity
from d5pipe.results.report.verdict_sections import level_notes
from d5pipe.results.run_results import RESULT_ROWS


def _names_metric(details: list[str], metric: str) -> bool:
    """True when a warning detail names ``metric`` (``fwd_bwd_time: ...`` or the prefix ``fwd_bwd: ...``)."""
    for d in details:
        for part in d.split("; "):
            head = part.split(":", 1)[0].strip()
            if head and ":" in part and (head == metric or metric.startswith(head + "_")):
                return True
    return False


def finish(data: RunData, stage: str, title: str, blocks: list[Block], notes_at: int | None = None) -> Section:
    """The level section: each warning line right after the figure of the metric it names, else after
    block ``notes_at`` (default: the first figure); then the side-by-side comparison of the level."""
    if notes_at is None:
        notes_at = next((i + 1 for i, b in enumerate(blocks) if isinstance(b, Figure)), len(blocks))
    placed: list[tuple[int, int, Block]] = []
    for n, (note, details) in enumerate(level_notes(data, stage)):
        at = next((i + 1 for i, b in enumerate(blocks) if isinstance(b, Figure)
                   and _names_metric(details, b.alt.split(" vs ", 1)[0])), notes_at)
        placed.append((at, n, note))
    for at, _, block in sorted(placed, key=lambda p: (-p[0], -p[1])):  # from the end: indices stay valid
        blocks.insert(at, block)
    extra, sub = comparison_blocks(data, stage)
    section = Section(stage, title)
    if sub is not None:  # the answer first: each variant against its baseline
        section.subsections.append(sub)
    folded = answer_blocks(data.stage_rows(stage))
    if folded:
        section.subsections.append(Section(f"configurations-{stage}", f"{stage}: configurations", folded))
    section.subsections.append(Section(f"detail-{stage}", f"{stage}: figures and checks",
                                       blocks + extra + glossary(data.stage_rows(stage), stage)))
    return section


def glossary(rows: pd.DataFrame, stage: str) -> list[Block]:
    """What each metric of the level's rows means, one row per declared name (a pattern once), in
    the order of the declarations: the level's (``Level.metrics``) and the results pass's rows
    (d5pipe.results.run_results.RESULT_ROWS), as docs/reference/metrics.md."""
    declared = {**(STAGES[stage].metrics if stage in STAGES else {}), **RESULT_ROWS}
    present = {found[0] for name in metric_names(rows) if (found := lookup(declared, str(name)))}
    body = [[n, d.unit, d.about] for n, d in declared.items() if n in present]
    return [Table(["metric", "unit", "meaning"], body, "What the metrics of this level mean", wrap={2})] if body else []


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


def repetition_means(rows: pd.DataFrame, metrics: Sequence[str]) -> list[Block]:
    """Per configuration, each outcome over its repetitions (axis ``repeat``): mean [95% t-CI], and
    "not reached" said as such (d5pipe.results.repetition_mean). Nothing without repetitions."""
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


def generic(data: RunData, stage: str, title: str) -> Section:
    """The section of a level without a module of its own: its side-by-side answers, its
    configurations and its per-point table (added by d5pipe.results.report.build)."""
    return finish(data, stage, title, [])


def side_by_side(rows: pd.DataFrame, axis: str, wanted: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """For a table of ``axis``'s values side by side: the varying axes, the metrics of ``wanted``
    the run has, and the axes to group by (``axis`` first, repetitions folded)."""
    axes, names = varying_axes(rows, repeat=True), set(metric_names(rows))
    return axes, [m for m in wanted if m in names], [axis, *[a for a in axes if a not in (axis, REPEAT_AXIS)]]


def folded_table(rows: pd.DataFrame, metrics: Sequence[str], axes: list[str], caption: str,
                 largest: Sequence[str] = ()) -> Table:
    """One row per configuration of ``axes``: each metric over its repetitions (separate processes),
    the mean -- geometric for timings -- with its 95% t-interval across them
    (d5pipe.results.report.frames.fold); the metrics of ``largest`` (errors) as their largest value;
    a verdict as its values with their counts."""
    ok = rows[(rows["status"] == "ok") & rows["metric"].isin(metrics)]
    keys = [ok[a].map(fmt_plain) for a in axes]
    body = []
    for key, group in ok.groupby(keys, sort=False):
        cells = []
        for m in metrics:
            g = group[group["metric"] == m]
            if str(g["kind"].iloc[0] if len(g) else "") == "verdict":
                counts = g["text"].value_counts()
                cells.append(", ".join(f"{v}" if n == len(g) else f"{v} ({n} of {len(g)})" for v, n in counts.items()))
                continue
            g = g[g["value"].notna()]
            if m in largest or (len(g) and (g["value"] == 0).all()):
                cells.append(quantity(float(g["value"].max()), str(g["unit"].iloc[0])) if len(g) else "")
                continue
            cells.append(folded_cell(g, log=str(g["kind"].iloc[0]) == "timing") if len(g) else "")
        label = list(key) if isinstance(key, tuple) else [key]
        body.append([*label, str(group["point_id"].nunique()), *cells])
    return Table([*axes, "repetitions", *metrics], body[:MAX_TABLE_ROWS], caption)
