"""A level-2 point on a training framework (``train.framework``; d5pipe.levels.level2.frameworks).

Every framework of a configuration starts from the same weights and sees the same batches in the
same order (the training seed is shared by the values of ``train.framework``:
d5pipe.levels.level2.pipeline.training_seed), with the same optimizer and hyperparameters, the
same thread count and float32. Before anything is timed, the framework is checked
(``framework_check``): ``train.framework_check_steps`` steps in float64 against PyTorch's float64
reference (losses, weight update, batch-norm statistics; d5pipe.levels.level2.frameworks.agreement),
and the timed float32 run's first loss -- the forward pass of the initial weights, before any update
(later float32 losses carry the rounding of the updates: 5e-3 apart after two steps of ResNet-50 at
batch 4) -- against the same reference, which catches a lowered precision. A framework that fails
is still trained and timed, and its point carries the failed check: the comparisons list it with
its failure and never rank it (d5pipe.results.comparisons).

Timing: the framework's compile or trace (``compile_s``) is measured in its ``prepare``, never in
a step; a step spans ``framework.step(x, y)`` (the batch handed over as numpy arrays, the update,
the device drained) on ``perf_counter_ns``; the batches are gathered before the clock starts, and
an epoch's last batch is dropped when it is smaller than the others (for every framework).
After each epoch the framework's weights are evaluated on the test split by the same PyTorch
evaluation for every framework (not timed).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.datasets import Dataset
from d5pipe.levels.declare import Profiles
from d5pipe.levels.instantiate import build
from d5pipe.levels.level2.early_stop import EarlyStop
from d5pipe.levels.level2.frameworks.agreement import Agreement, check, prepare, run_steps
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec, UnsupportedNetwork
from d5pipe.levels.level2.frameworks.graph import Graph
from d5pipe.levels.level2.frameworks.torch_framework import TorchFramework
from d5pipe.levels.level2.frameworks.trace import initial_weights, load_weights, model_tensors, trace
from d5pipe.levels.level2.metrics import add_epoch, energy_step_metrics, epochs_to_target, metric, training_metrics
from d5pipe.levels.level2.pipeline import training_loader
from d5pipe.levels.level2.sanity import sanity_checks
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level2.train_loop import evaluate
from d5pipe.levels.models import build_model, count_parameters
from d5pipe.levels.targets import target_of
from d5pipe.levels.training_log import checked as mllog_checked
from d5pipe.levels.verify import NO_DETECT, max_relative_difference, tolerance, verdict
from d5pipe.measure import energy
from d5pipe.measure.mllog import TrainingLog
from d5pipe.measure.profile import enabled as profiling

CPU = torch.device("cpu")


def optimizer_spec(conf: TrainConf) -> OptimizerSpec:
    """``train``'s optimizer with torch's conventions (momentum is SGD's only)."""
    return OptimizerSpec(conf.optimizer, conf.lr, conf.momentum if conf.optimizer == "sgd" else 0.0,
                         conf.weight_decay)


def _batches(conf: TrainConf, data: Dataset, seed: int) -> Any:
    """One epoch's full batches as numpy arrays per iteration (the level-2 shuffle of ``seed``). A
    last, smaller batch is left out for every framework: XLA and TensorFlow would compile another
    program for its shape inside a step."""
    loader = training_loader(conf, data, seed, CPU)

    class Epochs:
        def __iter__(self) -> Any:
            return ((x.numpy(), y.numpy()) for x, y in loader if len(y) == conf.batch_size)

    return Epochs()


def _sha256(weights: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode() + np.ascontiguousarray(weights[name], dtype=np.float32).tobytes())
    return h.hexdigest()


def _check(model: nn.Module, graph: Graph, w0: dict[str, np.ndarray], spec: OptimizerSpec,
           first: list[tuple[np.ndarray, np.ndarray]], threads: int, make: Any) -> tuple[Any, Any]:
    """(the float64 reference's steps, the framework's float64 agreement)."""
    reference = run_steps(TorchFramework(model, dtype="float64"), graph, w0, spec, first, threads)
    return reference, check(run_steps(make("float64"), graph, w0, spec, first, threads), reference, w0, graph,
                            "float64")


@dataclass
class Trained:
    """What the timed run gave: every step's loss and time, the per-epoch curves."""

    losses: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    curves: dict[str, list[float]] = field(default_factory=dict)
    epoch_samples: list[int] = field(default_factory=list)
    stopped: dict[str, Any] = field(default_factory=dict)
    energy: dict[str, Any] = field(default_factory=dict)


def _train(framework: Any, model: nn.Module, graph: Graph, conf: TrainConf, data: Dataset, seed: int,
           mllog: TrainingLog) -> Trained:
    """``train.epochs`` epochs of timed steps, each epoch's weights evaluated by PyTorch off the clock;
    ``mllog`` gets MLPerf's events of each epoch and evaluation."""
    out = Trained()
    evaluator = copy.deepcopy(model).float()
    tensors = model_tensors(evaluator, graph)
    batches = _batches(conf, data, seed)
    stop = EarlyStop.of(conf)
    span = energy.Span(energy.meter("cpu"))  # around each timed step, as its clock (the frameworks run on the CPU)
    for epoch in range(1, conf.epochs + 1):
        losses, times, n = [], [], 0
        mllog.epoch_start(epoch)
        for x, y in batches:
            span.begin()
            t0 = time.perf_counter_ns()
            losses.append(framework.step(x, y))
            times.append((time.perf_counter_ns() - t0) * 1e-9)
            span.end()
            n += len(y)
        mllog.epoch_stop(epoch)
        out.losses += losses
        out.step_times += times
        load_weights(tensors, framework.weights())
        test_loss, test_acc = evaluate(evaluator, data.x_test, data.y_test, conf.eval_batch_size, CPU)
        mllog.evaluation(test_acc, epoch_num=epoch)
        add_epoch(out.curves, sum(times), n, epoch=epoch, train_loss=float(np.average(losses)), test_loss=test_loss,
                  test_accuracy=test_acc)
        out.epoch_samples.append(n)
        if stop.after_epoch(epoch, test_loss, test_acc):
            break
    out.stopped = stop.record(len(out.epoch_samples), conf.epochs)
    out.energy = {**span.record(len(out.step_times)), "what": "the timed steps (framework.step); batches gathered "
                  "and evaluation excluded"}
    return out


def _verdict(name: str, agreement: Agreement, f32_err: float) -> list[Metric]:
    """The check's numbers and ``framework_check``, with what failed in its detail."""
    why = [f"{name} in float64: {agreement.why()}"] if not agreement.passed else []
    f32_tol = tolerance("framework", "float32")[0]
    said = verdict(f32_err, f32_tol, NO_DETECT, ok=agreement.passed)
    if not f32_err <= f32_tol:
        why.append(f"{name} in float32: its first loss differs by {f32_err:.3g} from PyTorch float64 "
                   f"(tolerance {f32_tol:g})")
    return [metric("framework_loss_rel_err", agreement.loss_rel_err),
            metric("framework_update_rel_l2", agreement.update_rel_l2),
            metric("framework_running_stats_rel_l2", agreement.running_stats_rel_l2),
            metric("framework_loss_rel_err_float32", f32_err),
            metric("framework_check", said, detail="; ".join(why) or None)]


def run_framework_point(ctx: PointContext, conf: TrainConf, data: Dataset, seed: int, seed_note: str,
                        seeds: dict[str, int], mllog: TrainingLog) -> PointOutcome:
    """Check, then train and time, one framework (see the module docstring), seeded (``seeds``) and
    its MLPerf log started by d5pipe.levels.level2.point."""
    key, target = target_of(asdict(conf), "framework")
    spec = optimizer_spec(conf)
    threads = torch.get_num_threads()
    try:  # a network the tracer or the framework's builder does not translate: skipped, with the reason
        model = build_model(ctx.config.get("model") or {}, data.input_shape, data.n_classes)
        graph = trace(model, (conf.batch_size, *data.input_shape))
        w0 = initial_weights(model, graph)

        def make(dtype: str) -> Any:
            return build(target, key, offered={"model": model, "dtype": dtype})

        first = [b for _, b in zip(range(conf.framework_check_steps), _batches(conf, data, seed))]
        reference, agreement = _check(model, graph, w0, spec, first, threads, make)
        framework = make("float32")
        told, compile_s = prepare(framework, graph, w0, spec, first[0], threads)
    except UnsupportedNetwork as exc:
        raise PointSkipped(str(exc)) from exc
    mllog.begin_run()
    run = _train(framework, model, graph, conf, data, seed, mllog)
    mllog.stop(conf.target_accuracy, epochs_to_target(run.curves, conf.target_accuracy) is not None)
    compliance = mllog_checked(ctx, mllog, seed, conf.batch_size)
    weights = framework.weights()
    profiled = _profile(ctx, make, graph, weights, spec, first[0], threads)
    finite = all(bool(np.isfinite(w).all()) for w in weights.values())
    sane = sanity_checks(run.losses, run.curves, {}, finite, data.n_classes)
    trained, samples, warnings = training_metrics(run.curves, run.step_times, run.epoch_samples, conf.target_accuracy,
                                                  _sha256(weights), count_parameters(model))
    metrics = [*_verdict(conf.framework, agreement, max_relative_difference(run.losses[:1], reference.losses[:1])),
               metric("compile_s", compile_s), *trained, *sane[0], metric("epochs_run", run.stopped["epochs_run"]), *energy_step_metrics(run.energy),
               *compliance[0]]
    return PointOutcome(metrics=metrics, samples={**samples, "compile_s": [compile_s]}, extra={
        "framework": {"selected": conf.framework, "class": type(framework).__qualname__},
        "check": {"steps": len(first), "float64": asdict(agreement), "reference_losses": reference.losses},
        "seeds": seeds, "training_seed": {"seed": seed, "point_seed": ctx.seed, "how": seed_note},
        "told": told, "versions": framework.versions(), "curves": run.curves, "sanity": sane[1],
        "warnings": warnings, "target_accuracy": conf.target_accuracy, "stopped": run.stopped, "energy": run.energy,
        "timing": "a step spans framework.step(x, y) on perf_counter_ns (numpy batch in, update done, device "
                  "drained); compile_s is the framework's prepare (compile or trace, never a step); batches "
                  "gathered and evaluation done off the clock", **profiled, **compliance[1]})


def _profile(ctx: PointContext, make: Callable[[str], Any], graph: Graph, weights: dict[str, np.ndarray],
             spec: OptimizerSpec, batch: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
    """The profiled pass (``profile.enabled``): steps of a twin of the framework, built from the
    trained weights, so the trained one and its metrics are untouched; under the framework's own
    profiler where it has one (d5pipe.levels.declare.Profiles), else torch.profiler."""
    extra: dict[str, Any] = {}
    if not profiling(ctx.profile):
        return extra
    twin = make("float32")
    twin.prepare(graph, {n: np.asarray(w, dtype=np.float32) for n, w in weights.items()}, spec, batch, threads)
    x, y = batch

    def step() -> None:
        twin.step(x, y)

    native = functools.partial(twin.profile_steps, step) if isinstance(twin, Profiles) else None
    profile_pass(ctx, extra, step, "train_step", native=native)
    return extra
