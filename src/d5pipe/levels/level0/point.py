"""Level 0: time one operator point, derive rates and % of peak, check forward and backward.

Timings: ``time`` (forward), and with ``operators.time_backward`` ``time_bwd`` (backward alone)
and ``time_fwd_bwd`` (``_backward_metrics``). A custom operator that names the built-in
it re-implements (``OperatorSpec.compare_to``) reports it as metric ``compare_to`` (kind info).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from d5pipe.core.fields import conf_from_dict
from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.device import DTYPES, require_device, synchronize
from d5pipe.levels.level0.correctness import check_backward, forward_report
from d5pipe.levels.level0.framework_point import run_framework_point
from d5pipe.levels.level0.frameworks import FRAMEWORKS
from d5pipe.levels.level0.metrics import metric
from d5pipe.levels.level0.operators import complete
from d5pipe.levels.level0.point_metrics import build_inputs, timed_metrics, verdict_metrics
from d5pipe.levels.level0.registry import resolve_operator
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.level0.spec import OperatorSpec
from d5pipe.measure.timer import measure

UNSUPPORTED_MARKERS = ("not implemented for", "not supported", "unsupported", "no kernel", "does not have a grad_fn")
"""Substrings of the RuntimeError torch raises when a dtype has no kernel on a device, or when an
operator has no backward at all (a compiled one without ``backward``, d5pipe.levels.level0.compiled)."""


def effective_impl_layout(spec: OperatorSpec, impl: str, layout: str) -> tuple[str, str]:
    """``(impl, layout)`` to run; impl ``channels_last`` is eager with that layout."""
    if impl == "channels_last":
        if layout not in ("contiguous", "channels_last"):
            raise PointSkipped(f"impl channels_last fixes the layout; layout {layout!r} does not apply")
        impl, layout = "eager", "channels_last"
    if layout not in spec.layouts:
        raise PointSkipped(
            f"layout {layout!r} does not apply to operator {spec.name!r} "
            f"(supported: {sorted(spec.layouts)})"
        )
    return impl, layout


def _is_unsupported(err: BaseException) -> bool:
    text = str(err).lower()
    return any(marker in text for marker in UNSUPPORTED_MARKERS)


def _backward_metrics(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], timer_cfg: Any,
                      device: str, seed: int, extra: dict[str, Any]) -> list[Metric]:
    """``time_bwd`` and ``time_fwd_bwd`` (with their spreads), or a warning when there is no backward.

    ``time_bwd`` repeats ``torch.autograd.grad(out, inputs, upstream, retain_graph=True)`` on one
    recorded forward graph -- the backward kernels only; ``time_fwd_bwd`` is a forward call and its
    backward, per repetition. Both use the shared timer with the point's timer settings, on the
    point's inputs (dtype, device, layout) made differentiable, and one seeded upstream gradient."""
    gen = torch.Generator().manual_seed((seed + 1) % 2**63)
    try:
        ins = [t.detach().clone().requires_grad_(True) for t in inputs]
        out = fn(*ins)
        upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(device=out.device, dtype=out.dtype)
        torch.autograd.grad(out, ins, upstream, retain_graph=True)  # raises here when there is no backward
        bwd = measure(lambda: torch.autograd.grad(out, ins, upstream, retain_graph=True), timer_cfg, device)
        both = measure(lambda: torch.autograd.grad(fn(*ins), ins, upstream), timer_cfg, device)
    except (RuntimeError, NotImplementedError) as err:
        if not _is_unsupported(err) and "does not require grad" not in str(err):
            raise
        extra["warnings"].append(f"backward not timed: {str(err).splitlines()[0]}")
        return []
    extra["timer_bwd"], extra["timer_fwd_bwd"] = bwd.info(), both.info()
    extra["warnings"] += [f"bwd: {w}" for w in bwd.warnings] + [f"fwd_bwd: {w}" for w in both.warnings]
    extra.setdefault("_samples", {}).update(time_bwd=list(bwd.samples), time_fwd_bwd=list(both.samples))
    return [*bwd.summary.to_metrics("time_bwd", "s", "time_bwd", prefix="bwd_"),
            *both.summary.to_metrics("time_fwd_bwd", "s", "time_fwd_bwd", prefix="fwd_bwd_")]


def _check_metrics(conf: OperatorsConf, fn: Callable[..., torch.Tensor], reference: Callable[..., torch.Tensor],
                   inputs: list[torch.Tensor], ref_inputs: list[torch.Tensor], dtype: torch.dtype,
                   gen: torch.Generator, extra: dict[str, Any]) -> list[Metric]:
    """The forward check against the float64 reference and the gradient check, as configured
    (``operators.check_correctness``, ``operators.check_backward``); notes go into ``extra``."""
    tol = (conf.tol_l2, conf.tol_max_rel)
    metrics: list[Metric] = []
    if conf.check_correctness:
        # inputs do not require grad; no no_grad() so a compiled impl is not recompiled
        fwd = forward_report(fn(*inputs), reference, ref_inputs, dtype, tol)
        metrics += verdict_metrics("", "correctness", fwd, extra)
        extra["tolerance"] = {"l2": fwd.tol_l2, "max_rel": fwd.tol_max_rel}
    if conf.check_backward:
        try:
            bwd = check_backward(fn, reference, inputs, ref_inputs, dtype, gen, tol)
        except (RuntimeError, NotImplementedError) as err:
            if not _is_unsupported(err):
                raise
            extra["warnings"].append(f"grad_check not run: backward unsupported here ({err})")
        else:
            metrics += verdict_metrics("grad_", "grad_check", bwd, extra)
    return metrics


def _skip_if_unsupported(forward: Callable[..., torch.Tensor], name: str, conf: OperatorsConf,
                         inputs: list[torch.Tensor]) -> None:
    """One call: a point whose operator does not run in its dtype on its device is skipped."""
    try:
        forward(*inputs)
        synchronize(torch.device(conf.device))
    except (RuntimeError, NotImplementedError) as err:
        if _is_unsupported(err):
            raise PointSkipped(f"{name} in {conf.dtype} on {conf.device}: {err}") from err
        raise


def run_point(ctx: PointContext) -> PointOutcome:
    """Measure one operator point (see docs of d5pipe.levels.level0); a framework other than
    PyTorch (``operators.framework``) runs through its engine (d5pipe.levels.level0.framework_point)."""
    conf = conf_from_dict(OperatorsConf, "operators", ctx.config.get("operators"))
    framework = FRAMEWORKS[conf.framework]
    if framework.engine is not None:
        return run_framework_point(ctx, conf, framework)
    require_device(conf.device, "operators.device")
    dtype = DTYPES[conf.dtype]
    spec = complete(resolve_operator(dataclasses.asdict(conf)))
    assert spec.reference is not None and spec.flops is not None and spec.min_bytes is not None
    if spec.forward is None:
        raise PointSkipped(f"operator {spec.name!r} has no PyTorch implementation (it gives "
                           f"{', '.join(sorted(spec.frameworks)) or 'none'})")
    forward = spec.forward
    reference = spec.reference
    impl, layout = effective_impl_layout(spec, conf.impl, conf.layout)
    torch.manual_seed(ctx.seed % 2**63)
    inputs, ref_inputs, gen = build_inputs(spec, conf, dtype, layout, ctx.seed)

    _skip_if_unsupported(forward, spec.name, conf, inputs)

    extra: dict[str, Any] = {
        "warnings": [],
        "threads": torch.get_num_threads(),
        "impl": impl,
        "layout": layout,
        "shapes": [list(t.shape) for t in inputs],
        "description": spec.description,
        **({"compiled": dict(spec.provenance)} if spec.provenance else {}),
    }
    metrics: list[Metric] = []
    fn: Callable[..., torch.Tensor] = forward
    if impl == "compile":
        # Fresh dynamo caches per point: compiled builtins share one wrapper code object, so
        # entries from earlier points would hit the recompile limit and silently run eager.
        # fullgraph=True: a graph break fails the point instead of timing a partly eager function.
        torch._dynamo.reset()
        fn = torch.compile(forward, dynamic=False, fullgraph=True)
        t0 = time.perf_counter()
        fn(*inputs)  # compiles; kept out of the timing below
        synchronize(torch.device(conf.device))
        metrics.append(metric("compile_s", time.perf_counter() - t0))

    m = measure(lambda: fn(*inputs), ctx.config.get("timer"), conf.device)
    metrics += timed_metrics(ctx, conf, spec, dtype, m, extra)
    if conf.time_backward:
        metrics += _backward_metrics(fn, inputs, ctx.config.get("timer"), conf.device, ctx.seed, extra)

    metrics += _check_metrics(conf, fn, reference, inputs, ref_inputs, dtype, gen, extra)
    profile_pass(ctx, extra, lambda: fn(*inputs), "forward", conf.device,
                 lambda: synchronize(torch.device(conf.device)))
    samples = {"time": list(m.samples), **extra.pop("_samples", {})}
    return PointOutcome(metrics=metrics, samples=samples, extra=extra)
