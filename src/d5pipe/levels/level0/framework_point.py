"""A level-0 point on a framework other than PyTorch (``operators.framework``; the frameworks and
their engines: d5pipe.levels.level0.frameworks).

The same point as PyTorch's (d5pipe.levels.level0.point), as far as the framework allows: the
inputs made once by the seeded ``make_inputs`` and rounded to the point's dtype, converted to the
framework's arrays (its dtype and layout) before anything is timed; the same timer
(d5pipe.measure.timer) around a call that returns only when its result is computed (the
declaration's ``sync``, recorded); the same rates and roofline; the output and, where the
framework differentiates, the gradients of every input for the same seeded upstream gradient,
against the same float64 reference through the same verification (d5pipe.levels.level0.correctness,
d5pipe.levels.verify). A first call that compiles (``jax.jit``, an ONNX Runtime session) is
``compile_s``, apart. What a framework lacks -- the operator, the dtype, the package -- skips the
point with the reason; nothing falls back to another framework. Backward timings (``time_bwd``,
``time_fwd_bwd``) are PyTorch's only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.declare import Profiles, missing_package
from d5pipe.levels.device import DTYPES
from d5pipe.levels.level0.correctness import forward_report, gradients_report, reference_gradients
from d5pipe.levels.level0.frameworks.contract import Engine, Framework, NativeOp, Prepared
from d5pipe.levels.level0.metrics import metric
from d5pipe.levels.level0.operators import complete
from d5pipe.levels.level0.point_metrics import build_inputs, timed_metrics, verdict_metrics
from d5pipe.levels.level0.registry import resolve_operator
from d5pipe.levels.level0.schema import BUILTIN_OPERATORS, OperatorsConf
from d5pipe.levels.level0.spec import OperatorSpec
from d5pipe.measure.timer import measure

UNSUPPORTED_MARKERS = ("could not find device for node", "no registered", "not_implemented", "not supported",
                       "unsupported")
"""Substrings of what a framework raises when it has no kernel for an operator in a dtype."""


def engine_of(ctx: PointContext, framework: Framework) -> Engine:
    """The framework's engine for the point's threads, made once per shard process and thread count
    (it imports the framework; one whose pools the process already fixed at other threads fails the
    point: d5pipe.levels.framework_threads)."""
    key = f"operators.framework={framework.name}"
    threads = torch.get_num_threads()
    cached = f"{key} threads={threads}"
    if cached not in ctx.cache:
        missing = missing_package(framework.packages)
        if missing is not None:
            raise PointSkipped(f"{key}: the Python package {missing!r} is not installed here")
        assert framework.engine is not None
        ctx.cache[cached] = framework.engine(threads)
    engine: Engine = ctx.cache[cached]
    return engine


def native_op(conf: OperatorsConf, spec: OperatorSpec, framework: Framework, engine: Engine) -> NativeOp:
    """The operator in the framework: its own form of a built-in, or the user's implementation."""
    if conf.op in BUILTIN_OPERATORS:
        op = engine.builtin(conf.op)
        if op is None:
            raise PointSkipped(f"operators.framework={framework.name} has no built-in {conf.op!r}")
        return op
    fn = spec.frameworks.get(framework.name)
    if fn is None:
        given = ["torch"] * (spec.forward is not None) + sorted(spec.frameworks)
        raise PointSkipped(f"operator {spec.name!r} gives no {framework.name} implementation "
                           f"(it gives: {', '.join(given) or 'none'})")
    return NativeOp(fn, form="the user's operator")


def _prepare(engine: Engine, op: NativeOp, arrays: list[Any], conf: OperatorsConf, framework: Framework) -> Prepared:
    """The operator ready to time, after one call; a missing kernel skips the point."""
    try:
        prepared = engine.prepare(op, arrays, conf.dtype)
        prepared.call()
    except PointSkipped:
        raise
    except Exception as err:  # noqa: BLE001 - each framework raises its own types
        if any(marker in str(err).lower() for marker in UNSUPPORTED_MARKERS):
            raise PointSkipped(f"{conf.op} in {conf.dtype} on {framework.name}: {str(err).splitlines()[0]}") from err
        raise
    return prepared


def _checks(conf: OperatorsConf, spec: OperatorSpec, framework: Framework, prepared: Prepared,
            ref_inputs: list[torch.Tensor], dtype: torch.dtype, gen: torch.Generator,
            extra: dict[str, Any]) -> list[Metric]:
    """The forward check and, where the framework differentiates, the gradient check."""
    assert spec.reference is not None
    tol = (conf.tol_l2, conf.tol_max_rel)
    metrics: list[Metric] = []
    if not (conf.check_correctness or conf.check_backward):
        return metrics
    out = torch.from_numpy(prepared.output())
    if conf.check_correctness:
        fwd = forward_report(out, spec.reference, ref_inputs, dtype, tol)
        metrics += verdict_metrics("", "correctness", fwd, extra)
        extra["tolerance"] = {"l2": fwd.tol_l2, "max_rel": fwd.tol_max_rel}
    if conf.check_backward and not framework.differentiates:
        extra["notes"].append(f"{framework.name} runs forward only: no gradient check")
    elif conf.check_backward:
        ref_out, upstream, ref_grads = reference_gradients(spec.reference, ref_inputs, dtype, gen)
        grads: list[torch.Tensor | None] = []
        if tuple(out.shape) == tuple(ref_out.shape):
            grads = [None if g is None else torch.from_numpy(g)
                     for g in prepared.gradients(upstream.to(torch.float64).numpy())]
        bwd = gradients_report(out.shape, ref_out, grads, ref_grads, dtype, tol)
        metrics += verdict_metrics("grad_", "grad_check", bwd, extra)
    return metrics


def run_framework_point(ctx: PointContext, conf: OperatorsConf, framework: Framework) -> PointOutcome:
    """Measure one operator point on ``framework`` (module docstring)."""
    if conf.dtype not in framework.dtypes:
        raise PointSkipped(f"operators.framework={framework.name} computes in {', '.join(framework.dtypes)}, "
                           f"not {conf.dtype}")
    engine = engine_of(ctx, framework)
    dtype = DTYPES[conf.dtype]
    spec = complete(resolve_operator(dataclasses.asdict(conf)))
    op = native_op(conf, spec, framework, engine)
    torch.manual_seed(ctx.seed % 2**63)
    _, ref_inputs, gen = build_inputs(spec, conf, dtype, "contiguous", ctx.seed)
    extra: dict[str, Any] = {
        "warnings": [], "notes": [], "threads": torch.get_num_threads(), "impl": conf.impl, "layout": conf.layout,
        "shapes": [list(t.shape) for t in ref_inputs], "description": spec.description,
        "framework": {"name": framework.name, "versions": engine.versions(), "form": op.form, "sync": framework.sync,
                      "gradient": framework.gradient or "none (forward only)", "told": engine.told},
    }
    if conf.time_backward:
        extra["notes"].append("time_bwd and time_fwd_bwd are measured on torch only")
    with engine.session(conf.dtype):
        prepared = _prepare(engine, op, [t.numpy() for t in ref_inputs], conf, framework)
        metrics = [metric("compile_s", prepared.compile_s)] if prepared.compile_s else []
        m = measure(prepared.call, ctx.config.get("timer"), "cpu")
        metrics += timed_metrics(ctx, conf, spec, dtype, m, extra)
        native = functools.partial(prepared.profile_steps, prepared.call) if isinstance(prepared, Profiles) else None
        profile_pass(ctx, extra, prepared.call, "forward", native=native)  # the framework's own profiler
        metrics += _checks(conf, spec, framework, prepared, ref_inputs, dtype, gen, extra)
    return PointOutcome(metrics=metrics, samples={"time": list(m.samples)}, extra=extra)
