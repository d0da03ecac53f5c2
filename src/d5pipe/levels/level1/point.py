"""Level 1: network processing of one model (inference and forward+backward), no training.

A point is model x dataset x ``level1`` (batch size, dtype, impl, layout, device). It measures,
with the shared timer (d5pipe.measure.timer: warm-up, blocked repetitions, device synchronisation, CI
stop rule, raw samples kept):

* ``inference_latency`` (s per batch, eval mode, ``torch.inference_mode``) and
  ``inference_throughput`` (samples/s = batch / latency, CI carried through);
* ``fwd_bwd_time`` (s per batch: train mode, gradients set to None, forward, cross-entropy,
  backward; no optimizer step) and ``train_throughput`` (samples/s);
* ``peak_memory_inference`` and ``peak_memory_fwd_bwd`` (bytes; d5pipe.measure.memory: CUDA
  ``max_memory_allocated`` delta on GPUs, torch CPU allocator events on the CPU);
* with ``impl: compile``: ``compile_inference_s`` and ``compile_fwd_bwd_s``, the first call of
  each mode (includes compilation), kind ``info``;
* ``flops_per_sample_inference`` / ``_fwd_bwd`` (counted, d5pipe.measure.flops), ``gflops_*``
  (achieved FLOP/s at the measured throughput) and, with ``level1.peak``, ``pct_peak_flops_*``
  against the machine's measured matmul peak in the same dtype;
* ``output_check`` (verdict ``pass``/``fail``/``undetectable``) with ``output_err_l2`` and
  ``output_err_max_rel``: the outputs against the float64 eager reference on the same batch
  (d5pipe.levels.level1.output_check; ``level1.output_check: false`` turns it off).

With ``level1.scenario`` other than ``none``, MLPerf LoadGen drives the same runtime in place of the
timer (d5pipe.levels.level1.loadgen): ``loadgen_valid``, ``loadgen_latency_p50/p90/p99``,
``loadgen_qps``, ``loadgen_throughput`` (and server's ``loadgen_peak_qps``); forward+backward, peak
memory and FLOPs are not measured then, ``output_check`` is.

The model is ``model.name`` (a built-in or a user target, d5pipe.levels.targets); a user model
may name the model it re-implements in ``model.reference``.

Unsupported combinations raise PointSkipped: a missing device, ``channels_last`` for a model
other than the CNN, a dtype whose kernels this build lacks on this device, a model that cannot
take the dataset's input shape.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from d5pipe.core.canonical import canonical_json
from d5pipe.core.fields import conf_from_dict, setting
from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.core.seeds import derive_seed
from d5pipe.levels import micro_batches
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.datasets import Dataset, load_for
from d5pipe.levels.device import require_device, synchronize, torch_dtype
from d5pipe.levels.instantiate import build
from d5pipe.levels.level1 import output_check
from d5pipe.levels.level1.metrics import MODE_NAMES, NETWORK_METRICS, metric
from d5pipe.levels.level1.onnx_file import run_onnx_point
from d5pipe.levels.level1.runtimes import declaration
from d5pipe.levels.level1.runtimes.contract import Engine
from d5pipe.levels.level1.schema import Level1Conf
from d5pipe.levels.models import build_model, check_input_kind, count_parameters
from d5pipe.levels.schema import ModelConf
from d5pipe.levels.targets import target_of
from d5pipe.measure.determinism import seed_everything
from d5pipe.measure.energy import energy_metrics
from d5pipe.measure.flops import FLOPS_NOTE, count_flops, flop_metrics, safe_count
from d5pipe.measure.memory import peak_memory
from d5pipe.measure.peak import flops_peak
from d5pipe.measure.stats import rate_metric
from d5pipe.measure.timer import measure

Native = Callable[[int, Path | None], dict[str, Any]] | None
"""A runtime's own profiler of its inference, bound to the point's batch (Prepared.profile)."""


def input_batch(data: Dataset, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``batch_size`` test samples (the test split repeated if it is smaller)."""
    n = len(data.y_test)
    idx = torch.arange(batch_size) % n
    return data.x_test[idx].contiguous(), data.y_test[idx].contiguous()


def _probe(fn: Callable[[], object], what: str) -> None:
    """Run ``fn`` once; missing kernels for a dtype/device skip the point."""
    try:
        fn()
    except (RuntimeError, NotImplementedError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "not implemented" in text.lower() or "unsupported" in text.lower():
            raise PointSkipped(f"{what}: {text}") from exc
        raise


def network_seed(config: dict[str, Any]) -> int:
    """The seed of a point's network weights: from the root seed, the ``model`` section and the
    dataset only, so the variants of one point (``level1.impl``, ``level1.runtime``, batch size,
    repetitions) run the *same* weights -- a fair comparison differs in the compared factor alone."""
    identity = canonical_json({"model": config.get("model") or {}, "dataset": config.get("dataset") or {}})
    return derive_seed(int(config.get("seed", 0)), "level1-network:" + identity)  # RootConf.seed: 0


def _build(ctx: PointContext, data: Dataset, name: str | None = None) -> nn.Module:
    seed_everything(network_seed(ctx.config))
    return build_model(ctx.config.get("model") or {}, data.input_shape, data.n_classes, name)


def _prepare_model(
    ctx: PointContext, conf: Level1Conf, data: Dataset, device: torch.device
) -> tuple[nn.Module, torch.Tensor, torch.Tensor, output_check.OutputCheck | None]:
    dtype = torch_dtype(conf.dtype, "level1.dtype")
    model = _build(ctx, data)
    model_cfg = ctx.config.get("model") or {}
    model_name = str(setting(model_cfg, ModelConf, "name"))
    reference_name = str(model_cfg.get("reference") or "")
    check: output_check.OutputCheck | None = None
    if conf.output_check:
        reference = model
        if reference_name:
            reference = _build(ctx, data, reference_name)
            output_check.align_to_reference(model, reference)
        check = output_check.prepare(model.to(dtype=dtype), reference, dtype,
                                     reference_name or model_name)
    x, y = input_batch(data, conf.batch_size)
    check_input_kind(model_name, not x.is_floating_point())
    if conf.layout == "channels_last" and (model_name in ("mlp", "transformer") or x.dim() != 4):
        raise PointSkipped(
            f"level1.layout=channels_last applies to convolutional models on 4-D input; got model "
            f"{model_name!r}, batch shape {tuple(x.shape)}"
        )
    model = model.to(device=device, dtype=dtype)
    x, y = place_input(x, conf, device), y.to(device)
    if conf.layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model, x, y, check


def place_input(x: torch.Tensor, conf: Level1Conf, device: torch.device) -> torch.Tensor:
    """A batch on the point's device, in its dtype (token ids stay integers) and layout."""
    dtype = torch_dtype(conf.dtype, "level1.dtype")
    x = x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device)
    return x.contiguous(memory_format=torch.channels_last) if conf.layout == "channels_last" else x


def _other_runtime(ctx: PointContext, model: nn.Module, x: torch.Tensor,
                   device: torch.device) -> tuple[Callable[..., torch.Tensor], dict[str, Any], Native]:
    """The network on ``level1.runtime`` (d5pipe.levels.level1.runtimes): a callable batch -> outputs
    and what to record (name, versions, what it was told, threads asked and used, the ONNX file)."""
    if device.type != "cpu":
        raise PointSkipped(f"level1.runtime={ctx.config['level1'].get('runtime')}: CPU only in this version")
    key, target = target_of(ctx.config.get("level1") or {}, "runtime")
    runtime: Engine = build(target, key)
    threads = torch.get_num_threads()
    model.eval()
    prepared = runtime.prepare(model, x, threads, ctx.run_dir / "onnx")
    info = {"name": runtime.name, "versions": runtime.versions(),
            "told": prepared.told, "threads_requested": threads, "threads": prepared.threads,
            **({"onnx": {"path": os.path.relpath(prepared.onnx["path"], ctx.run_dir),
                         "sha256": prepared.onnx["sha256"]}} if prepared.onnx else {})}
    if prepared.threads is None:
        info["warning"] = "the runtime does not report its intra-op threads: not pinned as far as d5pipe can tell"
    native = None if prepared.profile is None else functools.partial(prepared.profile, x)
    return prepared.run, info, native


def _measure_mode(ctx: PointContext, conf: Level1Conf, device: torch.device, mode: str, fn: Callable[[], None],
                  eager: Callable[[], None], compiled: bool, on_torch: bool, label: str, extra: dict[str, Any],
                  native: Native = None) -> tuple[list[Metric], list[float]]:
    """Time ``fn`` (one ``mode`` of the network) after a first call that is timed on its own (a
    compiled network compiles there); its rate, FLOPs (counted on the ``eager`` model: the same
    mathematics) and peak memory. Returns its metrics and time samples; notes go into ``extra``."""
    metrics: list[Metric] = []
    synchronize(device)
    t0 = time.perf_counter()
    _probe(fn, f"{conf.dtype} {mode} of {label} on {device}")
    synchronize(device)
    first_call = time.perf_counter() - t0
    if compiled:
        metrics.append(metric(f"compile_{mode}_s", first_call))
    m = measure(fn, ctx.config.get("timer") or {}, str(device))
    name, rate_name = MODE_NAMES[mode]
    key = f"{name}_s"
    metrics += m.summary.to_metrics(name, "s", key, prefix=f"{name}_")
    throughput = rate_metric(rate_name, float(conf.batch_size), m.summary, NETWORK_METRICS[rate_name].unit, key)
    metrics.append(throughput)
    metrics += energy_metrics(m.energy, "sample", float(conf.batch_size), f"_{mode}")
    counted = safe_count(functools.partial(count_flops, eager), extra["warnings"])
    if counted is not None:
        fpeak = flops_peak(ctx.cache, str(device), torch_dtype(conf.dtype, "level1.dtype")) if conf.peak else None
        metrics += flop_metrics(f"_{mode}", counted / conf.batch_size, throughput, fpeak)
    extra[f"timer_{mode}"] = m.info()
    extra["warnings"] += [f"{mode}: {w}" for w in m.warnings]
    profile_pass(ctx, extra, fn, mode, str(device), lambda: synchronize(device), native)
    if conf.measure_memory and on_torch:  # the torch allocator sees only PyTorch's own memory
        peak = peak_memory(fn, str(device))
        metrics.append(metric(f"peak_memory_{mode}", peak.bytes))
        extra[f"memory_{mode}"] = {"method": peak.method, "note": peak.note}
    return metrics, list(m.samples)


def _under_loadgen(ctx: PointContext, conf: Level1Conf, data: Dataset, forward: Callable[..., torch.Tensor],
                   device: torch.device, model: nn.Module, extra: dict[str, Any]) -> list[Metric]:
    """The point's runtime as LoadGen's system under test over the test split's batches
    (d5pipe.levels.level1.loadgen); what the record keeps goes into ``extra["loadgen"]``."""
    from d5pipe.levels.level1 import loadgen

    model.eval()
    batches = loadgen.qsl_batches(data.x_test, conf.batch_size, functools.partial(place_input, conf=conf, device=device))

    def run_batch(batch: torch.Tensor) -> None:
        with torch.inference_mode():
            forward(batch)
        synchronize(device)

    found, extra["loadgen"] = loadgen.run_scenario(ctx, conf, run_batch, batches)
    extra["warnings"] += [f"loadgen: {w}" for w in extra["loadgen"]["warnings"]]
    extra["not_measured"] = {"timer": f"level1.scenario={conf.scenario}: LoadGen measures inference, "
                                      "d5pipe's timer measures nothing"}
    return found


def run_point(ctx: PointContext) -> PointOutcome:
    """Measure inference and forward+backward of one model configuration."""
    cfg = ctx.config
    conf = conf_from_dict(Level1Conf, "level1", cfg.get("level1") or {})
    device = require_device(conf.device, "level1.device")
    if conf.onnx_file:
        return run_onnx_point(ctx, conf, cfg.get("timer") or {})
    data = load_for(cfg.get("dataset") or {}, ctx.data_dir)
    model, x, y, check = _prepare_model(ctx, conf, data, device)
    forward: nn.Module | Callable[..., torch.Tensor] = model
    declared = declaration(conf.runtime)
    compiled = conf.impl == "compile" or declared.compiles
    if compiled:
        forward = torch.compile(model, mode=conf.compile_mode)
    on_torch = declared.on_torch
    runtime_info: dict[str, Any] = {"name": conf.runtime if on_torch else "torch",
                                    "versions": {"torch": str(torch.__version__)}, "threads": torch.get_num_threads(),
                                    **({"told": {"compile_mode": conf.compile_mode}} if compiled else {})}
    native: Native = None  # a runtime's own profiler (its inference)
    if not on_torch:
        forward, runtime_info, native = _other_runtime(ctx, model, x, device)

    def infer(net: Callable[..., torch.Tensor] = forward) -> None:
        with torch.inference_mode():
            net(x)

    def fwd_bwd(net: Callable[..., torch.Tensor] = forward) -> None:
        model.zero_grad(set_to_none=True)  # then in level1.micro_batches parts (one: the plain forward and backward)
        micro_batches.backward(net, micro_batches.cross_entropy, x, y, conf.micro_batches)

    extra: dict[str, Any] = {"impl": conf.impl, "n_parameters": count_parameters(model), "warnings": [],
                             "flops": FLOPS_NOTE, "runtime": runtime_info}
    metrics: list[Metric] = [metric("n_parameters", count_parameters(model))]
    samples: dict[str, list[float]] = {}
    modes = [("inference", infer, model.eval), ("fwd_bwd", fwd_bwd, model.train)]
    if conf.scenario != "none":  # MLPerf LoadGen drives the runtime in place of d5pipe's timer
        metrics += _under_loadgen(ctx, conf, data, forward, device, model, extra)
        modes = []
    elif not on_torch:
        modes = modes[:1]
        extra["not_measured"] = {"fwd_bwd": f"level1.runtime={conf.runtime} runs inference only"}
    elif not conf.fwd_bwd:
        modes = modes[:1]
        extra["not_measured"] = {"fwd_bwd": "level1.fwd_bwd is false"}
    if conf.micro_batches > 1 and len(modes) > 1:  # before anything is timed, on the initial weights
        found, extra["micro_batch_check"] = micro_batches.check(model, x, y, conf.micro_batches,
                                                                 conf.micro_batch_tolerance, conf.detect_rel_error)
        metrics += found
    label = str((cfg.get("model") or {}).get("name", "model"))
    for mode, fn, set_mode in modes:
        set_mode()
        eager = functools.partial(fn, model)  # the FLOPs are counted on the eager model: the same mathematics
        measured, samples[f"{MODE_NAMES[mode][0]}_s"] = _measure_mode(ctx, conf, device, mode, fn, eager,
                                                                       compiled, on_torch, label, extra, native)
        metrics += measured
    model.zero_grad(set_to_none=True)
    if check is not None:
        check_metrics, extra["output_check"] = output_check.run_check(check, model, forward, x, conf)
        metrics += check_metrics
    return PointOutcome(metrics=metrics, samples=samples, extra=extra)

