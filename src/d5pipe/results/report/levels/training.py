"""The level-2 section: training curves, time to target, outcomes over repetitions, checks, acceptance."""

from __future__ import annotations

from typing import Any

from d5pipe.levels.level2.stage import LEVEL
from d5pipe.results.report.blocks import Block, Figure, Section, Table
from d5pipe.results.report.figures import verdict_table
from d5pipe.results.report.frames import (
    label_of,
    metric_names,
    natural_order,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.levels.common import finish, repetition_means, upper_bounds
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.plots import curves as plot_curves


def section(data: RunData) -> Section:
    rows = data.stage_rows(LEVEL.name)
    blocks: list[Block] = []
    curves = data.curves[data.curves["stage"] == LEVEL.name]
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
