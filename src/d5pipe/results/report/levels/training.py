"""The level-2 section: training curves, time to target, outcomes over repetitions, checks, acceptance."""

from __future__ import annotations

from typing import Any

import pandas as pd

from d5pipe.levels.level2.stage import LEVEL
from d5pipe.results.report.blocks import Block, Figure, Section, Table, Text
from d5pipe.results.report.figures import verdict_table
from d5pipe.results.report.frames import (
    REPEAT_AXIS,
    fmt_plain,
    label_of,
    metric_frame,
    metric_names,
    natural_order,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.levels.common import finish, folded_table, repetition_means, side_by_side, upper_bounds
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.plots import curves as plot_curves
from d5pipe.results.report.plots import metric_vs_axis

PIPELINE_METRICS = ("data_stall_fraction", "data_wait", "first_batch_s", "step_time", "step_time_in_memory",
                    "loader_samples_per_s", "model_samples_per_s")
"""The input pipeline's table, in this order (those a run has)."""

FRAMEWORK_METRICS = ("framework_check", "framework_update_rel_l2", "framework_loss_rel_err_float32", "compile_s",
                     "step_time", "samples_per_s", "test_accuracy", "time_to_target_s")
"""The training frameworks' table, in this order (those a run has)."""


def frameworks_table(rows: pd.DataFrame) -> list[Block]:
    """Each training framework's check, compile time, step time and what it reached, side by side
    (the step-time speedup of each over torch, with its verdict, is in the side-by-side comparison)."""
    axes, metrics, by = side_by_side(rows, "train.framework", FRAMEWORK_METRICS)
    if "train.framework" not in axes:
        return []
    return [folded_table(rows, metrics, by, (
        "Training frameworks side by side, each over its repetitions (separate processes): the mean -- geometric "
        "for times -- [95% t-interval across repetitions], the check's differences as their largest (each "
        "metric's meaning: the table at the end). A framework that failed its check is timed too, and never "
        "ranked"), largest=("framework_update_rel_l2", "framework_loss_rel_err_float32"))]


def input_pipeline(rows: pd.DataFrame) -> list[Block]:
    """How the training waited for its data: the loader's throughput against ``train.num_workers``
    beside the model's own consumption rate (read off: the workers that remove the stall), and a
    table of the stall fraction, the waits and the step times."""
    names = set(metric_names(rows))
    blocks: list[Block] = []
    axes = varying_axes(rows, repeat=True)
    if "loader_samples_per_s" in names and "model_samples_per_s" in names and "train.num_workers" in axes:
        others = [a for a in axes if a not in ("train.num_workers", REPEAT_AXIS)]
        series = [a for a in others if a == "dataset.storage"]
        facets = [a for a in others if a not in series]
        loader = metric_frame(rows, "loader_samples_per_s", "train.num_workers", series, facets)
        model = metric_frame(rows, "model_samples_per_s", "train.num_workers", [], facets)
        frame = pd.concat([loader.assign(series="loader: " + loader["series"].astype(str)),
                           model.assign(series="model, batches in memory")], ignore_index=True)
        png, _ = metric_vs_axis(frame, xlabel="train.num_workers", ylabel="throughput", numeric_x=True,
                                logy=True, unit="samples/s")
        blocks.append(Figure(png, "loader_samples_per_s vs train.num_workers",
                             "Input pipeline (log scale): the loader alone (median per-batch rate, 95% CI) against "
                             "train.num_workers, one line per storage, and the model's own consumption rate "
                             "(a batch over a step on batches held in memory). With workers, a loader line below "
                             "the model's means the training waits for its data; with 0 workers the loading is not "
                             "overlapped with the steps, and data_stall_fraction is its share of the time."))
    blocks += stall_sentence(rows, [a for a in axes if a != REPEAT_AXIS])
    present = [m for m in PIPELINE_METRICS if m in names]
    if "data_stall_fraction" in names and len(axes) > 0:
        cols, body, total = wide_table(rows, present, axes)
        more = f" (first {len(body)} of {total} points)" if total > len(body) else ""
        blocks.append(Table(cols, body, "Input pipeline: how long the steps waited for their data, the step time "
                            f"with and without a loader (each metric's meaning: the table at the end){more}"))
    return blocks


def stall_sentence(rows: pd.DataFrame, axes: list[str]) -> list[Block]:
    """Which configurations wait longest and shortest for their data (median over repetitions)."""
    stall = rows[(rows["metric"] == "data_stall_fraction") & (rows["status"] == "ok") & rows["value"].notna()]
    if not axes or stall.empty:
        return []
    per = stall.groupby(axes, dropna=False)["value"].median().sort_values(ascending=False)
    if len(per) < 2:
        return []

    def name(key: object) -> str:
        values = key if isinstance(key, tuple) else (key,)
        return ", ".join(f"{a.rsplit('.', 1)[-1]}={fmt_plain(v)}" for a, v in zip(axes, values, strict=True))

    worst, best = per.index[0], per.index[-1]
    return [Text(f"Waiting for data: {name(worst)} spends {per.iloc[0]:.1%} of its step time waiting for the next "
                 f"batch, the most of the {len(per)} configurations; {name(best)} the least, {per.iloc[-1]:.1%} "
                 "(data_stall_fraction, median over epochs and repetitions).", "note")]


def section(data: RunData) -> Section:
    rows = data.stage_rows(LEVEL.name)
    blocks: list[Block] = []
    curves = data.res.curves[data.res.curves["stage"] == LEVEL.name]
    if not curves.empty:
        axes = varying_axes(rows, repeat=True)
        pts = rows.drop_duplicates("point_id").set_index("point_id")
        labels = {p: label_of(pts.loc[p], axes) if p in pts.index else p
                  for p in natural_order(rows, axes) if p in set(curves["point_id"])}
        labels.update({p: p for p in curves["point_id"].unique() if p not in labels})
        frame = curves.assign(label=curves["point_id"].map(labels))
        names = [s for s in ("train_loss", "test_accuracy") if s in set(frame["series"])]
        names += [s for s in dict.fromkeys(frame["series"]) if s not in names]
        blocks.append(Figure(plot_curves(frame, names[:6]), "training curves",
                             "Loss and accuracy per epoch, one line per point."))
    tta = [n for n in metric_names(rows) if n.startswith("time_to")]
    if tta:
        cols, body, _ = wide_table(rows, tta, varying_axes(rows, repeat=True))
        tta_rows = rows[rows["metric"].isin(tta) & (rows["status"] == "ok")]
        has_ci = bool(tta_rows["ci_low"].notna().any() and tta_rows["ci_high"].notna().any())
        caption = ("Time to target accuracy (median [95% CI])" if has_ci else
                   "Time to target accuracy (one training run per point: a single value, no CI)")
        blocks.append(Table(cols, body, caption))
    blocks += repetition_means(rows, ("test_accuracy", "train_loss", "test_loss", "time_to_target_s"))
    blocks += input_pipeline(rows)
    blocks += frameworks_table(rows)
    names = metric_names(rows)
    checks: list[str] = [n for n in ("optimizer_check", "optimizer_divergence") if n in names]
    checks += [n for n in names if n.startswith("sanity:")]
    if checks:
        section = data.config.get("train")
        train: dict[str, Any] = section if isinstance(section, dict) else {}
        blocks += verdict_table(
            data, LEVEL.name, rows, checks, varying_axes(rows, repeat=True),
            "Checks of the training: the optimizer against train.reference_optimizer "
            f"({train.get('reference_optimizer') or 'none'}) after the same steps from the same weights, "
            "divergence ||p - p_ref|| / ||p_ref - p_0|| against train.reference_tolerance = "
            f"{train.get('reference_tolerance', '?')}; reference-free sanity checks (finite, not diverged, "
            "above chance) have a column only where one failed")
    acc = [n for n in metric_names(rows) if n.startswith("acceptance:")]
    if acc:
        blocks += verdict_table(data, LEVEL.name, rows, acc, varying_axes(rows, repeat=True), "Acceptance thresholds of the recipe")
    blocks += upper_bounds(rows, [("samples_per_s", "")])
    return finish(data, LEVEL.name, LEVEL.title, blocks)
