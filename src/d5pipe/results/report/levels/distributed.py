"""The level-3 section: time per step, speedup and efficiency against the ranks, bus bandwidth, and
where each rank's time goes (compute, communication, waiting; the straggler)."""

from __future__ import annotations

import pandas as pd

from d5pipe.levels.level3.rank_split import PARTS, RANK_METRIC, STRAGGLER_RULE
from d5pipe.levels.level3.stage import LEVEL
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.report.blocks import Block, Section, Table, Text
from d5pipe.results.report.figures import figure
from d5pipe.results.report.frames import (
    choose_layout,
    find_metric,
    fmt_plain,
    fmt_value,
    label_of,
    metric_names,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.levels.common import finish, folded_table, side_by_side, upper_bounds
from d5pipe.results.report.loader import RunData


def _base_case(rows: pd.DataFrame, metric: str, x: str, groups: list[str]) -> Text | None:
    """The speedup base case (smallest x) and its absolute time, per series."""
    m = rows[(rows["metric"] == metric) & (rows["status"] == "ok") & rows["value"].notna()]
    if m.empty or x not in m:
        return None
    base = m[m[x] == m[x].min()]
    parts = [f"{label_of(r, groups) if groups else 'all'}: {fmt_value(r['value'], r['ci_low'], r['ci_high'], r['unit'])}"
             for _, r in base.head(12).iterrows()]
    return Text(f"Speedup base case {x}={fmt_plain(m[x].min())}, {metric}: " + "; ".join(parts), "note")


STRATEGY_METRICS = ("time_per_step_s", "comm_payload_bytes_per_rank_step", "comm_payload_vs_expected",
                    "comm_payload_vs_gradient", "staleness_max", "final_loss", "test_loss", "test_accuracy",
                    "steps_to_target_loss", "time_to_target_loss_s")
"""The strategies table's columns, in this order (those the run has)."""
STRATEGY_COLUMNS_TEXT = ("the payload each rank hands to the network per step (mean over ranks), its ratio to the "
                         "strategy's analytic expectation and its share of the gradient, the largest staleness an "
                         "asynchronous strategy applied, the final training loss, rank 0's model on the test split, "
                         "and the steps and time to distributed.target_loss")
"""What the strategies table shows after the time per step, in both of its forms."""

FOLDED_CAPTION = ("Strategies side by side, each over its repetitions (separate processes): the mean -- geometric "
                  "for times -- [95% t-interval across repetitions] of the time per step (the slowest rank's median), "
                  f"{STRATEGY_COLUMNS_TEXT} (a repetition that never reached it is left out)")


def strategies_table(rows: pd.DataFrame) -> list[Block]:
    """Each distributed strategy's time, communication and what the model reached, side by side
    (the speedup of each over allreduce, with its verdict, is in the side-by-side comparison)."""
    axes, metrics, by = side_by_side(rows, "distributed.strategy", STRATEGY_METRICS)
    if "distributed.strategy" not in axes:
        return []
    if REPEAT_AXIS in axes:
        return [folded_table(rows, metrics, by, FOLDED_CAPTION)]
    cols, body, total = wide_table(rows, metrics, by)
    more = f" (first {len(body)} of {total} points)" if total > len(body) else ""
    return [Table(cols, body, "Strategies side by side: time per step (the slowest rank, median [95% CI]), "
                  f"{STRATEGY_COLUMNS_TEXT}{more}")]


RANK_POINTS = 8
"""Points whose per-rank split the report shows (results.parquet has every point's)."""


def _ms(seconds: float) -> str:
    return "" if seconds != seconds else f"{seconds * 1e3:.3g}"


def rank_split_table(rows: pd.DataFrame) -> list[Block]:
    """Per point and rank: compute, communication and waiting per step, their sum, and which rank
    is the straggler (d5pipe.levels.level3.rank_split)."""
    ok = rows[rows["status"] == "ok"]
    parts = ok[ok["metric"].astype(str).str.fullmatch(RANK_METRIC.pattern)]
    if parts.empty:
        return []
    named = dict(zip(ok.loc[ok["metric"] == "straggler", "point_id"], ok.loc[ok["metric"] == "straggler", "text"]))
    axes = varying_axes(rows, repeat=True)
    points = list(dict.fromkeys(parts["point_id"]))
    body: list[list[str]] = []
    for pid in points[:RANK_POINTS]:
        mine = parts[parts["point_id"] == pid]
        per_rank: dict[int, dict[str, float]] = {}
        for metric, value in zip(mine["metric"], mine["value"]):
            match = RANK_METRIC.fullmatch(str(metric))
            if match:
                per_rank.setdefault(int(match.group(2)), {})[match.group(1)] = float(value)
        label = label_of(mine.iloc[0], axes)
        for rank, v in sorted(per_rank.items()):
            split = [v.get(p, float("nan")) for p in PARTS]
            body.append([label, str(rank), *(_ms(x) for x in split), _ms(sum(split)),
                         "straggler" if named.get(pid) == f"rank {rank}" else ""])
    more = f" (first {RANK_POINTS} of {len(points)} points)" if len(points) > RANK_POINTS else ""
    return [Table(["point", "rank", "compute ms", "comm ms", "wait ms", "sum ms", ""], body,
                  "Where each rank's time goes, mean ms per step: compute (outside the collectives d5pipe counts), "
                  "communication (the least time any rank spent inside the step's collectives), waiting (the rest "
                  "of its time inside them, and at the lockstep barrier for the last rank); the sum is about the slowest "
                  "rank's step. "
                  f"{STRAGGLER_RULE[0].upper()}{STRAGGLER_RULE[1:]}{more}")]


def section(data: RunData) -> Section:
    rows = data.stage_rows(LEVEL.name)
    blocks: list[Block] = []
    time_m = find_metric(rows, ["time_per_step_s", "time_per_step"], prefix="time_per_step")
    names = metric_names(rows)  # speedup and efficiency: derived once by the level (d5pipe.results.run_results)
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
        scaled = rows[rows["metric"].isin(["speedup", "efficiency"])]
        metrics = [m for m in ("speedup", "efficiency") if m in names]
        axes = [a for a in ("distributed.backend", "distributed.scaling", *varying_axes(scaled, repeat=True))
                if a in scaled.columns and scaled[a].notna().any()]
        cols, body, _ = wide_table(scaled, metrics, list(dict.fromkeys(axes)))
        blocks.append(Table(cols[1:], [r[1:] for r in body],
                            "Speedup and efficiency against the 1-rank point of the same configuration "
                            "(value [95% CI]), as in the figures above"))
    blocks += strategies_table(rows)
    blocks += rank_split_table(rows)
    busbw = find_metric(rows, ["busbw_GBps", "busbw"], prefix="busbw")
    if busbw:
        bw_layout = choose_layout(rows, ["distributed.message_bytes"], ["distributed.backend"])
        blocks += figure(rows, busbw, bw_layout, title="bus bandwidth")
    blocks += upper_bounds(rows, [("samples_per_s", "")])
    return finish(data, LEVEL.name, LEVEL.title, blocks, notes_at)
