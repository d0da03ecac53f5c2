"""The level-1 section: throughput and latency per runtime against the batch, upper bounds."""

from __future__ import annotations

from d5pipe.levels.level1.stage import LEVEL
from d5pipe.results.report.blocks import Block, Section
from d5pipe.results.report.figures import figure
from d5pipe.results.report.frames import (
    choose_layout,
    metric_names,
    varying_axes,
)
from d5pipe.results.report.levels.common import finish, upper_bounds
from d5pipe.results.report.loader import RunData


def section(data: RunData) -> Section:
    rows = data.stage_rows(LEVEL.name)
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
    return finish(data, LEVEL.name, LEVEL.title, blocks, notes_at)
