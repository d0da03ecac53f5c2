"""A training point's metrics: what each name means (:data:`TRAINING_METRICS`, the level's
``Level.metrics``; the report and docs/reference/metrics.md read it) and :func:`training_metrics`,
which PyTorch's loop (d5pipe.levels.level2.point) and a framework's (framework_point) both feed.
Imports without torch.

``train.metrics`` adds metrics of its own: each entry is a built-in name (``macro_f1``) or a target
(d5pipe.levels.targets) called after training as ``fn(model, x_test, y_test)`` with the model in
eval mode under ``torch.no_grad`` and the test split on the model's device. It returns a number
(metric named after the function) or a mapping ``name -> number``; each becomes a ``numerical``
metric (compared with a tolerance by ``d5pipe reproduce``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from d5pipe.core.allowlist import TARGET_KEY
from d5pipe.core.errors import D5PipeError
from d5pipe.core.outcome import Declared, Metric, declared_metric
from d5pipe.levels.level2.sanity import PREFIX as SANITY_PREFIX
from d5pipe.levels.targets import metric_targets
from d5pipe.levels.verify import MICRO_BATCH_METRICS
from d5pipe.measure.energy import energy_metrics
from d5pipe.measure.flops import flop_declared
from d5pipe.measure.mllog_check import DECLARED as MLLOG_DECLARED
from d5pipe.measure.stats import summarize, timing_declared

if TYPE_CHECKING:
    import torch
    from torch import nn


TRAINING_METRICS: dict[str, Declared] = {
    "test_accuracy": Declared("", "numerical", None, "the final epoch's model on the test split"),
    "best_test_accuracy": Declared("", "numerical", None, "the best test accuracy after any epoch"),
    "test_loss": Declared("", "numerical", None, "the final epoch's model's mean loss on the test split"),
    "train_loss": Declared("", "numerical", None, "the final epoch's sample-weighted mean step loss"),
    "train_accuracy": Declared("", "numerical", None, "the final epoch's model on the training split (PyTorch's loop)"),
    "time_to_target_s": Declared("s", "timing", "step_time_s", "training time until the first epoch whose test "
                                 "accuracy reaches train.target_accuracy (NaN: never); re-runs test the step times"),
    "epochs_to_target": Declared("epochs", "numerical", None, "that epoch (NaN: never)"),
    "samples_per_s": Declared("samples/s", "timing", "epoch_samples_per_s", "all training samples over all training "
                              "time (the per-epoch rates' harmonic mean, weighted by samples)"),
    "train_time_s": Declared("s", "timing", "epoch_train_time_s", "the training loops' wall time, evaluation excluded"),
    **timing_declared("step_time", "s", "step_time_s", "a training step (zero_grad to the end of optimizer.step): "
                      "median [95% CI]", "step_time_"),
    "compile_s": Declared("s", "timing", "compile_s", "a framework's compile or trace, never part of a step"),
    "data_wait": Declared("s", "timing", "data_wait_s", "a step's wait for its batch: median over steps [95% CI]"),
    "first_batch_s": Declared("s", "timing", "first_batch_s", "an epoch's first wait (the loader's start): median"),
    "data_stall_fraction": Declared("", "timing", "epoch_stall_fraction", "waits / (waits + steps): median of epochs"),
    "loader_samples_per_s": Declared("samples/s", "timing", "loader_batch_samples_per_s", "the loader alone, median"),
    "step_time_in_memory": Declared("s", "timing", "in_memory_step_s", "a step on batches held in memory, median"),
    "model_samples_per_s": Declared("samples/s", "timing", "in_memory_samples_per_s", "a batch over an in-memory step"),
    "step_peak_memory": Declared("B", "numerical", None, "peak tensor memory of one batch's forward and backward"),
    "weights_sha256": Declared("", "info", None, "the final weights' sha256 (deterministic with train.deterministic)"),
    "n_parameters": Declared("", "count", None, "the model's parameters"),
    "train_steps": Declared("", "count", None, "optimizer steps taken"),
    "epochs_run": Declared("epochs", "count", None, "epochs trained: fewer than train.epochs when train.early_stop "
                           "stopped the run (why: the record's extra.stopped)"),
    "energy_per_step": Declared("J", "info", None, "energy of the training passes over the steps taken (RAPL: the "
                                "host's packages and DRAM, other processes included; NVML: the GPU), evaluation "
                                "excluded; absent where unreadable (why: the record's extra.energy)"),
    "power": Declared("W", "info", None, "average power over the training passes, as energy_per_step"),
    "optimizer_check": Declared("", "verdict", None, "the optimizer against train.reference_optimizer"),
    "optimizer_divergence": Declared("", "numerical", None, "||p - p_ref|| / ||p_ref - p_0|| after the same steps"),
    "framework_check": Declared("", "verdict", None, "a framework against PyTorch in float64 from the same weights"),
    "framework_loss_rel_err": Declared("", "numerical", None, "float64: the largest relative loss difference"),
    "framework_update_rel_l2": Declared("", "numerical", None, "float64: the weight update's relative L2 difference"),
    "framework_running_stats_rel_l2": Declared("", "numerical", None, "float64: the same of batch norms' statistics"),
    "framework_loss_rel_err_float32": Declared("", "numerical", None, "the float32 run's first loss, relative error"),
    **flop_declared("", "samples_per_s", "epoch_samples_per_s"),
    **MICRO_BATCH_METRICS,
    "sampler_once_per_epoch": Declared("", "verdict", None, "train.sampler: one epoch draws every sample once"),
    "sampler_class_histogram": Declared("", "verdict", None, "train.sampler: an epoch's classes follow the dataset's "
                                        "(Pearson's chi-square, fails below train.sampler_alpha)"),
    "sampler_histogram_p": Declared("", "info", None, "that test's p-value"),
    "sampler_seeded_order": Declared("", "verdict", None, "train.sampler: two samplers seeded alike give one first "
                                     "epoch"),
    f"{SANITY_PREFIX}<rule>": Declared("", "verdict", None, "a reference-free sanity rule that failed (train_finite, "
                                       "not_diverged, above_chance; only failures have a row)"),
    "macro_f1": Declared("", "numerical", None, "train.metrics' built-in: the unweighted mean over classes of the "
                         "F1 score on the test split (a user target's metric is named by it)"),
    **MLLOG_DECLARED,
}
"""Every metric name of a training point and its one meaning (a user target of ``train.metrics``
names its own)."""


metric = partial(declared_metric, TRAINING_METRICS)
"""``metric(name, value, kind=None, ci=None, detail=None)``: ``name``'s Metric as :data:`TRAINING_METRICS`
declares it (``kind`` replaces its kind)."""


def median_metric(name: str, values: Sequence[float]) -> Metric:
    """``name``: the median of ``values`` with its CI."""
    s = summarize(list(values))
    return metric(name, s.median, ci=(s.ci_low, s.ci_high))


def energy_step_metrics(record: dict[str, Any]) -> list[Metric]:
    """``energy_per_step`` and ``power`` from a d5pipe.measure.energy ``Span.record`` over the
    steps taken; none where energy is unavailable (the record says why)."""
    return [metric(m.name, m.value) for m in energy_metrics(record, "step")]


def epochs_to_target(curves: dict[str, list[float]], target: float | None) -> int | None:
    """The first epoch whose test accuracy reaches ``target`` (None: never, or no target)."""
    return next((i + 1 for i, a in enumerate(curves["test_accuracy"]) if target is not None and a >= target), None)


def add_epoch(curves: dict[str, list[float]], seconds: float, samples: int, **values: float) -> dict[str, float]:
    """Append one epoch's ``values`` to ``curves``, then its training time, the running total and its
    rate (``epoch_train_time_s``, ``cum_train_time_s``, ``samples_per_s``); returns the epoch's row."""
    cum = sum(curves.get("epoch_train_time_s", [])) + seconds
    row = {**values, "epoch_train_time_s": seconds, "cum_train_time_s": cum, "samples_per_s": samples / seconds}
    for k, v in row.items():
        curves.setdefault(k, []).append(v)
    return row


def training_metrics(curves: dict[str, list[float]], step_times: list[float], epoch_samples: list[int],
                     target: float | None, weights_sha256: str, n_parameters: int, deterministic: bool = False
                     ) -> tuple[list[Metric], dict[str, list[float]], list[str]]:
    """A run's metrics, their raw samples and the step times' warnings, from its per-epoch ``curves``
    (:func:`add_epoch`'s), every step's time and each epoch's samples."""
    total = sum(curves["epoch_train_time_s"])
    reached = epochs_to_target(curves, target)
    step = summarize(step_times)
    measured = {
        "test_accuracy": curves["test_accuracy"][-1], "best_test_accuracy": max(curves["test_accuracy"]),
        "test_loss": curves["test_loss"][-1], "train_loss": curves["train_loss"][-1],
        **({"train_accuracy": curves["train_accuracy"][-1]} if "train_accuracy" in curves else {}),
        "time_to_target_s": float(curves["cum_train_time_s"][reached - 1]) if reached else math.nan,
        "epochs_to_target": float(reached) if reached else math.nan,
        "samples_per_s": sum(epoch_samples) / total, "train_time_s": total}
    metrics = [*(metric(name, value) for name, value in measured.items()),
               *step.to_metrics("step_time", "s", "step_time_s", prefix="step_time_"),
               metric("weights_sha256", weights_sha256, "deterministic" if deterministic else None),
               metric("n_parameters", n_parameters), metric("train_steps", len(step_times))]
    samples = {"step_time_s": step_times, "epoch_train_time_s": curves["epoch_train_time_s"],
               "epoch_samples_per_s": curves["samples_per_s"]}
    return metrics, samples, list(step.warnings)


def macro_f1(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Unweighted mean over classes of the F1 score on ``x, y`` (a built-in extra metric)."""
    pred = model(x).argmax(dim=1)
    scores = []
    for c in y.unique().tolist():
        tp = float(((pred == c) & (y == c)).sum())
        fp = float(((pred == c) & (y != c)).sum())
        fn = float(((pred != c) & (y == c)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0)
    return sum(scores) / len(scores)


def extra_metrics(train_cfg: dict[str, Any], model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[Metric]:
    """The metrics of every ``train.metrics`` entry (see the module docstring)."""
    import torch

    from d5pipe.levels.instantiate import build

    out: list[Metric] = []
    model.eval()
    for key, target in metric_targets(train_cfg):
        with torch.no_grad():
            value = build(target, key, model, x, y)
        name = str(target[TARGET_KEY]).rsplit(".", 1)[-1]
        items = value.items() if isinstance(value, dict) else [(name, value)]
        for label, v in items:
            try:
                number = float(v)
            except (TypeError, ValueError):
                raise D5PipeError(f"{key}: metric {label!r} returned {v!r}, not a number") from None
            out.append(Metric(str(label), number if math.isfinite(number) else math.nan, "", "numerical"))
    return out
