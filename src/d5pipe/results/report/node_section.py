"""The report's node-to-node variability: the same point on several nodes (``placement.node``).

For each stage's primary time (L0 ``time``, L1 ``inference_latency``, L2 ``step_time``, L3
``time_per_step_s``) and each combination of the other axes measured on at least two nodes: the
median on every node, the **spread between nodes** ((max - min) / median of the per-node medians)
and the **CI within a node** (the median half-width of the per-node 95% CIs, relative to their
value). Where the spread between nodes exceeds the CI within one, a single node's CI understates
the uncertainty of the result on this cluster; the section says how often that happened.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from d5pipe.levels.registry import NODE_AXIS
from d5pipe.results.columns import axis_columns
from d5pipe.results.report.blocks import Block, Section, Table, Text
from d5pipe.results.report.frames import fmt_plain
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.units import quantity

PRIMARY: tuple[str, ...] = ("time", "inference_latency", "step_time", "time_per_step_s", "fwd_bwd_time")


def _pct(v: float) -> str:
    return "" if not math.isfinite(v) else f"{100 * v:.1f}%"


def variability_rows(results: pd.DataFrame, stage: str) -> list[dict[str, Any]]:
    """One dict per point measured on >= 2 nodes: its other axes, per-node medians, spread, CI."""
    rows = results[(results["stage"] == stage) & (results["status"] == "ok") & results[NODE_AXIS].notna()]
    metric = next((m for m in PRIMARY if m in set(rows["metric"])), None)
    if metric is None:
        return []
    m = rows[(rows["metric"] == metric) & rows["value"].notna()]
    others = [a for a in axis_columns(m.columns) if a != NODE_AXIS and m[a].nunique(dropna=True) > 1]
    groups = m.groupby(others, dropna=False, sort=True) if others else [((), m)]
    out = []
    for key, g in groups:
        if g[NODE_AXIS].nunique() < 2:
            continue
        g = g.sort_values(NODE_AXIS)
        values = g["value"].astype(float)
        centre = float(values.median())
        half = ((g["ci_high"].astype(float) - g["ci_low"].astype(float)) / 2 / values).dropna()
        names = g["slurm_nodes"].astype(str).tolist() if "slurm_nodes" in g.columns else [""] * len(g)
        keys = key if isinstance(key, tuple) else (key,)
        out.append({
            "stage": stage, "metric": metric, "unit": str(g["unit"].iloc[0]),
            "label": ", ".join(f"{a}={fmt_plain(v)}" for a, v in zip(others, keys, strict=False)) or "all",
            "per_node": [(int(n), float(v), "" if nm in ("", "None", "nan") else nm)
                         for n, v, nm in zip(g[NODE_AXIS], values, names, strict=True)],
            "spread": (float(values.max()) - float(values.min())) / centre if centre > 0 else math.nan,
            "within": float(half.median()) if len(half) else math.nan,
        })
    return out


def node_variability(data: RunData) -> Section | None:
    """The section; None unless some point ran on two or more nodes."""
    if NODE_AXIS not in data.results.columns:
        return None
    found = [r for stage in data.stages for r in variability_rows(data.results, stage)]
    if not found:
        return None
    body, dominated = [], set()
    for i, r in enumerate(found):
        medians = "; ".join(f"{n}{f' ({name})' if name else ''}: {quantity(v, r['unit'])}" for n, v, name in r["per_node"])
        exceeds = math.isfinite(r["spread"]) and math.isfinite(r["within"]) and r["spread"] / 2 > r["within"]
        if exceeds:
            dominated.add(i)
        body.append([r["stage"], r["label"], r["metric"], str(len(r["per_node"])), medians, _pct(r["spread"]),
                     f"±{_pct(r['within'])}" if math.isfinite(r["within"]) else "", "yes" if exceeds else "no"])
    blocks: list[Block] = [
        Text(f"{len(dominated)} of {len(found)} point(s): the spread between nodes exceeds the 95% CI within a "
             "node, so one node's CI understates this cluster's variation." if dominated else
             f"For all {len(found)} point(s) the spread between nodes is within the 95% CI of one node.",
             "warn" if dominated else "note"),
        Table(["stage", "point", "metric", "nodes", "median per node", "spread between nodes",
               "CI within a node", "between > within"], body,
              "The same point on each node (placement.node): spread = (max - min) / median of the node medians; "
              "between > within when half the spread exceeds the median CI half-width", wrap={1, 4}),
    ]
    return Section("nodes", "Node-to-node variability", blocks)
