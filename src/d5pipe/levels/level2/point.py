"""Level 2: one training run per point (model x dataset x optimizer x schedule x batch size).

``run_point(ctx)`` reads the ``model``, ``dataset`` and ``train`` sections, seeds everything from
the point seed, trains for ``train.epochs`` epochs and evaluates on the test split after each.

Its metrics, and what each name means: d5pipe.levels.level2.metrics.TRAINING_METRICS (built by
:func:`~d5pipe.levels.level2.metrics.training_metrics`, as a framework's point builds them), with
``flops_per_sample`` (forward + backward of one training batch, counted; d5pipe.measure.flops),
``gflops`` (achieved at ``samples_per_s``) and, with ``train.peak``, ``pct_peak_flops`` against
the machine's measured float32 matmul peak.

Sanity checks without a reference (d5pipe.levels.level2.sanity): a run with a non-finite loss,
metric or weight, a training loss that clearly rose, or a final test accuracy at or below chance
after enough steps gets a ``sanity:<rule>`` = ``fail`` row (the point fails); ``extra["sanity"]``
holds what every rule measured.

Plug-ins (d5pipe.levels.targets): the model, dataset, optimizer (``train.optimizer``) and LR
scheduler (``train.schedule``) are built-ins or user targets; ``train.metrics`` adds metrics
computed on the test split after training (d5pipe.levels.level2.metrics); with
``train.reference_optimizer`` the optimizer is checked against that reference from the same
initial weights (``optimizer_check``, ``optimizer_divergence``;
d5pipe.levels.level2.optimizer_check); a user's sampler (``train.sampler``) orders the training
samples and is checked first (``sampler_*`` verdicts; d5pipe.levels.level2.sampler_check).

Timing (see :mod:`d5pipe.levels.level2.train_loop`): training time is the wall time of the training loops
(batch gathering, forward, backward, optimizer step, the device drained at the end of each
epoch), evaluation and log writing excluded; a step's time runs from the batch being available
(before ``zero_grad``) to the end of ``optimizer.step()`` (``perf_counter_ns`` on the CPU, timing
events on CUDA). Every step is written to ``ctx.work_dir / "steps.jsonl"`` (every
``train.log_every``-th step) after its epoch, every epoch too; per-epoch curves go to
``extra["curves"]``.

A generated dataset (``synthetic_images``/``synthetic_tokens``, d5pipe.levels.lazy_samples) trains
like any other: each batch is generated from its indices (d5pipe.levels.level2.train_loop) and
evaluation goes through the splits batch by batch, so one epoch over ``n_samples`` costs
generating them. ``train.metrics`` get the test split whole, which is generated once for them
when it is at most :data:`METRICS_SPLIT_BYTES` (else the point is skipped before training); token
ids (int64) with a built-in model that takes float features (:data:`FLOAT_INPUT_MODELS`) skip
the point.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from d5pipe.core.fields import conf_from_dict, setting
from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels import micro_batches
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.datasets import Dataset, load_for
from d5pipe.levels.device import require_device, state_dict_sha256, synchronize
from d5pipe.levels.lazy_samples import LazySamples
from d5pipe.levels.level2.early_stop import EarlyStop
from d5pipe.levels.level2.metrics import (
    add_epoch,
    energy_step_metrics,
    epochs_to_target,
    extra_metrics,
    median_metric,
    metric,
    training_metrics,
)
from d5pipe.levels.level2.optimizer_check import check_optimizer
from d5pipe.levels.level2.pipeline import measure_loader, train_labels, training_loader, training_seed
from d5pipe.levels.level2.sampler_check import check_sampler
from d5pipe.levels.level2.sampling import make_sampler
from d5pipe.levels.level2.sanity import sanity_checks
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level2.train_loop import EpochStats, StepLog, evaluate, train_epoch
from d5pipe.levels.models import UnsupportedInput, build_model, check_input_kind, count_parameters
from d5pipe.levels.optim import make_optimizer, make_scheduler
from d5pipe.levels.schema import ModelConf
from d5pipe.levels.targets import metric_targets
from d5pipe.levels.training_log import checked as mllog_checked
from d5pipe.levels.training_log import facts, point_log
from d5pipe.measure import energy
from d5pipe.measure.determinism import deterministic_mode, seed_everything
from d5pipe.measure.flops import FLOPS_NOTE, flop_metrics, safe_count, training_step_flops
from d5pipe.measure.memory import PeakMemory, peak_memory
from d5pipe.measure.mllog import TrainingLog
from d5pipe.measure.peak import flops_peak

ENERGY_WHAT = "each epoch's training pass, as train_time_s (loader waits included); evaluation excluded"
"""What ``extra.energy`` (``energy_per_step``, ``power``) covers."""
METRICS_SPLIT_BYTES = 1 << 30
"""``train.metrics`` on a generated dataset: the largest test split generated whole for them."""


def _check_generated(cfg: dict[str, Any], conf: TrainConf, data: Dataset) -> None:
    """Skip, before training, what the data cannot give: token ids to a float-feature model (or the
    reverse), and on a generated dataset what the module docstring lists."""
    model_name = str(setting(cfg.get("model"), ModelConf, "name"))
    try:
        check_input_kind(model_name, not data.x_train.dtype.is_floating_point)
    except UnsupportedInput as exc:
        raise PointSkipped(f"{exc} (dataset {data.meta['key']})") from exc
    if not data.generated:
        return
    size = data.x_test.nbytes if isinstance(data.x_test, LazySamples) else 0
    if metric_targets(asdict(conf)) and size > METRICS_SPLIT_BYTES:
        raise PointSkipped(f"train.metrics need the whole test split, {size} bytes of the generated dataset "
                           f"{data.meta['key']} (at most {METRICS_SPLIT_BYTES}); lower dataset.n_samples or "
                           "dataset.test_fraction")


def resolve_train(train_cfg: dict[str, Any]) -> TrainConf:
    """The ``train`` section, every value checked against its schema."""
    return conf_from_dict(TrainConf, "train", train_cfg)


@dataclass
class TrainResult:
    curves: dict[str, list[float]]
    step_times_s: list[float]
    wait_times_s: list[float]
    """Per step, the wait for its batch (d5pipe.levels.level2.train_loop.StepClock.waits)."""
    first_waits_s: list[float]
    """Per epoch, the wait for its first batch."""
    epoch_stall_fraction: list[float]
    epoch_samples: list[int]
    step_losses: list[float]
    stopped: dict[str, Any]
    """Why training ended (d5pipe.levels.level2.early_stop)."""
    energy: dict[str, Any]
    """d5pipe.measure.energy's record of the training passes (or why there is none)."""


def fit(
    model: nn.Module, data: Dataset, conf: TrainConf, seed: int, device: torch.device, log: StepLog,
    mllog: TrainingLog | None = None,
) -> TrainResult:
    """Train ``model`` on ``data`` as ``conf`` says; evaluate after every epoch. ``mllog`` gets
    MLPerf's events of each epoch and evaluation (outside the timed passes)."""
    ml = mllog or TrainingLog(None, {})
    optimizer = make_optimizer(asdict(conf), model.parameters())
    scheduler = make_scheduler(asdict(conf), optimizer)  # stepped once per epoch
    loader = training_loader(conf, data, seed, device)
    curves: dict[str, list[float]] = {}
    epochs: list[EpochStats] = []
    steps = 0
    stop = EarlyStop.of(conf)
    span = energy.Span(energy.meter(str(device)))  # around each epoch's training pass, as train_time_s
    for epoch in range(1, conf.epochs + 1):
        lr = float(optimizer.param_groups[0]["lr"])
        ml.epoch_start(epoch)
        stats = train_epoch(model, loader, optimizer, device, epoch, log, steps, conf.log_every, conf.micro_batches,
                            span)
        ml.epoch_stop(epoch)
        epochs.append(stats)
        steps += len(stats.step_times_s)
        scheduler.step()
        test_loss, test_acc = evaluate(model, data.x_test, data.y_test, conf.eval_batch_size, device)
        # accuracy of the epoch's final model on the training split (not counted in the loop)
        ml.evaluation(test_acc, epoch_num=epoch)
        _, train_acc = evaluate(model, data.x_train, data.y_train, conf.eval_batch_size, device)
        row = add_epoch(curves, stats.train_time_s, stats.samples, epoch=epoch, lr=lr, train_loss=stats.train_loss,
                        train_accuracy=train_acc, test_loss=test_loss, test_accuracy=test_acc)
        log.write({"event": "epoch", **row})
        log.flush()
        if stop.after_epoch(epoch, test_loss, test_acc):
            log.write({"event": "early_stop", "epoch": epoch, "reason": stop.reason})
            break
    return TrainResult(curves, [t for e in epochs for t in e.step_times_s], [w for e in epochs for w in e.wait_times_s],
                       [e.wait_times_s[0] for e in epochs if e.wait_times_s], [e.stall_fraction for e in epochs],
                       [e.samples for e in epochs], [v for e in epochs for v in e.step_losses],
                       stop.record(len(epochs), conf.epochs), {**span.record(steps), "what": ENERGY_WHAT})


def _notes(conf: TrainConf, curves: dict[str, list[float]]) -> list[str]:
    """What the reader of a training point's record must know about its numbers."""
    notes: list[str] = []
    if conf.target_accuracy is not None and epochs_to_target(curves, conf.target_accuracy) is None:
        notes.append(
            f"target test accuracy {conf.target_accuracy} never reached in {len(curves['test_accuracy'])} epochs "
            f"(best {max(curves['test_accuracy']):.4f}); time_to_target_s is NaN"
        )
    if not conf.deterministic:
        notes.append("train.deterministic is false: weights_sha256 is informational only")
    return notes


MEMORY_NOTE = ("one batch's forward and backward after training, in train.micro_batches parts; "
               "the optimizer's state and step are the same for every micro_batches and are not in it")


def _step_memory(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, k: int, device: torch.device) -> PeakMemory:
    """Peak tensor memory of one batch's forward and backward in ``k`` micro-batches (the model's
    gradients are cleared before and after: its weights are not touched)."""
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    model.zero_grad(set_to_none=True)
    peak = peak_memory(lambda: micro_batches.backward(model, loss_fn, xb, yb, k), str(device))
    model.zero_grad(set_to_none=True)
    return peak


def _profiled_step(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, conf: TrainConf) -> Any:
    """One training step of a copy of the trained model with an optimizer of its own: what the
    profiled pass (d5pipe.measure.profile) runs. The trained model and its metrics are untouched."""
    twin = copy.deepcopy(model).train()
    opt = make_optimizer(asdict(conf), twin.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(twin(xb), yb).backward()
        opt.step()
    return step


def run_point(ctx: PointContext) -> PointOutcome:
    """Train one point; see the module docstring for what is measured."""
    cfg = ctx.config
    seed, seed_note = training_seed(ctx)
    conf = resolve_train(cfg.get("train") or {})
    device = require_device(conf.device, "train.device")
    data = load_for(cfg.get("dataset") or {}, ctx.data_dir)
    _check_generated(cfg, conf, data)
    seeds = seed_everything(seed)
    mllog = point_log(ctx)
    mllog.start(facts(ctx.experiment, seed, conf, conf.batch_size, len(data.y_train), len(data.y_test)))
    if conf.framework:
        from d5pipe.levels.level2.framework_point import run_framework_point

        return run_framework_point(ctx, conf, data, seed, seed_note, seeds, mllog)
    with deterministic_mode(conf.deterministic, str(device)) as det:
        model = build_model(cfg.get("model") or {}, data.input_shape, data.n_classes)
        model.to(device)
        initial = copy.deepcopy(model) if conf.reference_optimizer else None
        first = (data.x_train[: conf.batch_size].to(device), data.y_train[: conf.batch_size].to(device))
        sampling: tuple[list[Metric], dict[str, Any]] = ([], {})
        if conf.sampler != "shuffle":  # a user's sampler is checked before it orders the run
            labels = train_labels(data)
            sampling = check_sampler(lambda s: make_sampler(asdict(conf), len(labels), labels, s), labels,
                                     seed, data.n_classes, conf.sampler_alpha)
        micro: tuple[list[Metric], dict[str, Any]] = ([], {})
        if conf.micro_batches > 1:  # before training: the gradients of the initial weights
            micro = micro_batches.check(model, *first, conf.micro_batches, conf.micro_batch_tolerance,
                                        conf.detect_rel_error)
        with StepLog(Path(ctx.work_dir) / "steps.jsonl") as log:
            log.write({"event": "start", "point_id": ctx.point_id, "seed": seed, "point_seed": ctx.seed,
                       "train": asdict(conf), "dataset": data.meta["key"]})
            mllog.begin_run()
            result = fit(model, data, conf, seed, device, log, mllog)
            mllog.stop(conf.target_accuracy, epochs_to_target(result.curves, conf.target_accuracy) is not None)
            weights = state_dict_sha256(model)
            weights_finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
            log.write({"event": "end", "steps": len(result.step_times_s), "weights_sha256": weights})
        n_test = len(data.y_test) if conf.metrics or not data.generated else 0  # generated only when used
        added = extra_metrics(asdict(conf), model, data.x_test[:n_test].to(device), data.y_test[:n_test].to(device))
        checked: tuple[list[Metric], dict[str, Any]] = ([], {})
        if initial is not None:
            checked = check_optimizer(initial, data, asdict(conf), conf, seed, device)
        flop_warnings: list[str] = []
        counted = safe_count(lambda: training_step_flops(model, *first), flop_warnings)
        memory = _step_memory(model, *first, conf.micro_batches, device) if conf.measure_memory else None
        loader: tuple[list[Metric], dict[str, list[float]]] = ([], {})
        if conf.measure_loader:
            loader = measure_loader(model, data, conf, seed, device)
        profiled: dict[str, Any] = {}
        if ctx.profile:
            profile_pass(ctx, profiled, _profiled_step(model, *first, conf), "train_step", str(device),
                         lambda: synchronize(device))
    curves = result.curves
    extra_values = {m.name: m.value for m in added if isinstance(m.value, float)}
    sane = sanity_checks(result.step_losses, curves, extra_values, weights_finite, data.n_classes)
    notes = _notes(conf, curves)
    metrics, trained_samples, step_warnings = training_metrics(
        curves, result.step_times_s, result.epoch_samples, conf.target_accuracy, weights, count_parameters(model),
        conf.deterministic)
    throughput = next(m for m in metrics if m.name == "samples_per_s")
    metrics += [median_metric("data_wait", result.wait_times_s), median_metric("first_batch_s", result.first_waits_s),
                median_metric("data_stall_fraction", result.epoch_stall_fraction)]  # how long the steps waited
    metrics += [metric("epochs_run", result.stopped["epochs_run"]), *energy_step_metrics(result.energy)]
    checks = {"optimizer_check": checked, "micro_batch_check": micro, "sampler_check": sampling}
    compliance = mllog_checked(ctx, mllog, seed, conf.batch_size)
    metrics += [*added, *checked[0], *sane[0], *micro[0], *sampling[0], *compliance[0]]
    if memory is not None:
        metrics.append(metric("step_peak_memory", memory.bytes))
    metrics += loader[0]
    if counted is not None:
        n = min(conf.batch_size, len(data.y_train))
        peak = flops_peak(ctx.cache, str(device), torch.float32) if conf.peak else None
        metrics += flop_metrics("", counted / n, throughput, peak)
    return PointOutcome(
        metrics=metrics,
        samples={**trained_samples, "data_wait_s": result.wait_times_s, "first_batch_s": result.first_waits_s,
                 "epoch_stall_fraction": result.epoch_stall_fraction, **loader[1]},
        extra={
            "curves": curves,
            "seeds": seeds,
            "training_seed": {"seed": seed, "point_seed": ctx.seed, "how": seed_note},
            "determinism": det,
            "dataset": {k: data.meta[k] for k in ("key", "checksum", "n_train", "n_test", "input_shape")},
            "target_accuracy": conf.target_accuracy,
            "timing": "training loop wall time (perf_counter, device drained per epoch), evaluation "
                      "and logging excluded; a step spans zero_grad to the end of optimizer.step() "
                      + ("(cuda timing events)" if device.type == "cuda" else "(perf_counter_ns)")
                      + "; a step's data wait spans the end of the previous step (an epoch's first: before "
                        "the loader is asked) to its batch in hand, on the host clock",
            "notes": notes,
            "stopped": result.stopped,
            "energy": result.energy,
            **profiled,
            **compliance[1],
            "warnings": [*step_warnings, *flop_warnings],
            "flops": FLOPS_NOTE,
            "step_log": "steps.jsonl",
            "sanity": sane[1],
            **{name: found for name, (_, found) in checks.items() if found},
            **({"memory": {"method": memory.method, "note": memory.note, "what": MEMORY_NOTE}} if memory else {}),
        },
    )
