"""What every framework's level-0 point shares: the seeded inputs, the rates' roofline against the
machine's ceilings, and a check's verdict as metrics (d5pipe.levels.level0.point for PyTorch,
d5pipe.levels.level0.framework_point for the others)."""

from __future__ import annotations

from typing import Any

import torch

from d5pipe.core.outcome import Metric
from d5pipe.levels.contract import PointContext
from d5pipe.levels.level0.metrics import OPERATOR_METRICS, metric
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.level0.spec import OperatorSpec
from d5pipe.levels.verify import ErrorReport
from d5pipe.measure.ceilings import NARROW, REFRESH_NEAR, machine_ceilings, roofline
from d5pipe.measure.energy import energy_metrics
from d5pipe.measure.stats import rate_metric
from d5pipe.measure.timer import Measurement


def build_inputs(
    spec: OperatorSpec, conf: OperatorsConf, dtype: torch.dtype, layout: str, seed: int
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Generator]:
    """Seeded inputs in the point's dtype/device/layout, and the float64 reference inputs."""
    gen = torch.Generator().manual_seed(seed % 2**63)
    assert spec.make_inputs is not None  # operators.complete() filled it in
    base = spec.make_inputs(conf.size, conf.batch, gen)
    rounded = [t.to(dtype) for t in base]
    ref_inputs = [t.to(torch.float64) for t in rounded]
    inputs = spec.layouts[layout]([t.to(conf.device) for t in rounded])
    return inputs, ref_inputs, gen


def verdict_metrics(prefix: str, name: str, report: ErrorReport, extra: dict[str, Any]) -> list[Metric]:
    """A check's verdict and errors; its note, if any, goes to ``extra[name + "_note"]``."""
    if report.note:
        extra[f"{name}_note"] = report.note
    return [
        metric(name, report.verdict()),
        metric(f"{prefix}err_l2", report.err_l2),
        metric(f"{prefix}err_max_abs", report.err_max_abs),
        metric(f"{prefix}err_max_rel", report.err_max_rel),
    ]


def _low(rate: Metric) -> float:
    """The lower CI bound of a rate (its value where it has no CI)."""
    return float(rate.ci_low if rate.ci_low is not None else rate.value or 0.0)


def roofline_metrics(ctx: PointContext, device: str, dtype: torch.dtype, flops: float, nbytes: float,
                     gflops_m: Metric, gbps_m: Metric, extra: dict[str, Any]) -> list[Metric]:
    """The point against the machine's ceilings (d5pipe.measure.ceilings): ``peak_gflops`` (FLOP
    ceiling of its dtype) and ``pct_peak_flops``; ``peak_gbps`` (bandwidth of its working set's
    memory level) and ``pct_peak_bw``; ``bound_gflops`` (roofline: min of the two) and
    ``pct_of_bound`` (of the bandwidth bound for a point without FLOPs).

    A ceiling the point beats beyond its CI (lower CI bound of the rate above it) is named in the
    record's ``roofline.suspect`` and in a warning: it did not bound this point."""
    gflops, gbps = float(gflops_m.value or 0.0), float(gbps_m.value or 0.0)  # rates are floats
    ceilings = machine_ceilings(device, (dtype,), memo=ctx.cache)
    b = roofline(ceilings, dtype, flops, nbytes)
    high = float(gflops_m.ci_high if gflops_m.ci_high is not None else gflops)
    refreshed = flops > 0 and high >= REFRESH_NEAR * b.flop_ceiling_gflops > 0
    if refreshed:  # close to the ceiling: time its fastest kernels again, now (only raises it)
        ceilings = machine_ceilings(device, (dtype,), memo=ctx.cache,
                                    refresh=(dtype, torch.float32) if dtype in NARROW else (dtype,))
        b = roofline(ceilings, dtype, flops, nbytes)
    out: list[Metric] = []
    if b.flop_ceiling_gflops > 0:
        out += [metric("peak_gflops", b.flop_ceiling_gflops),
                metric("pct_peak_flops", 100 * gflops / b.flop_ceiling_gflops)]
    if b.gbps > 0:
        out += [metric("peak_gbps", b.gbps), metric("pct_peak_bw", 100 * gbps / b.gbps)]
    if flops > 0 and b.gflops > 0:
        out += [metric("bound_gflops", b.gflops), metric("pct_of_bound", 100 * gflops / b.gflops)]
    elif b.gbps > 0:
        out.append(metric("pct_of_bound", 100 * gbps / b.gbps))
    out.append(metric("memory_level", b.level))
    extra["roofline"] = {"memory_level": b.level, "limited_by": b.limited_by, "flop_ceiling": b.via,
                         "working_set_bytes": nbytes, "ceilings": ceilings.key,
                         "ceilings_measured_s": ceilings.seconds, "ceiling_refreshed": refreshed}
    suspect = []
    if flops > 0 and 0 < b.flop_ceiling_gflops < _low(gflops_m):
        suspect.append(f"flops {b.via} ({b.flop_ceiling_gflops:.4g} GFLOP/s)")
    if 0 < b.gbps < _low(gbps_m):
        suspect.append(f"bandwidth {b.level} ({b.gbps:.4g} GB/s)")
    if suspect:
        extra["roofline"]["suspect"] = suspect
        extra["warnings"].append("faster than the measured ceiling(s) " + ", ".join(suspect)
                                 + " beyond its CI: marked suspect (remeasure with `d5pipe peaks --remeasure`)")
    return out


def timed_metrics(ctx: PointContext, conf: OperatorsConf, spec: OperatorSpec, dtype: torch.dtype,
                  m: Measurement, extra: dict[str, Any]) -> list[Metric]:
    """The forward timing ``time`` with its summary, GFLOP/s and GB/s with the CI carried through,
    FLOPs and bytes, the roofline (``operators.peak``) and ``compare_to``; the timer's record and
    warnings go into ``extra``."""
    assert spec.flops is not None and spec.min_bytes is not None  # operators.complete() filled them in
    extra["timer"] = m.info()
    extra["warnings"].extend(m.warnings)
    flops = spec.flops(conf.size, conf.batch)
    nbytes = spec.min_bytes(conf.size, conf.batch, torch.tensor([], dtype=dtype).element_size())
    gflops = rate_metric("gflops", flops / 1e9, m.summary, OPERATOR_METRICS["gflops"].unit, "time")
    gbps = rate_metric("gbps", nbytes / 1e9, m.summary, OPERATOR_METRICS["gbps"].unit, "time")
    metrics = [
        *m.summary.to_metrics("time", "s", "time"),
        *energy_metrics(m.energy),
        gflops,
        gbps,
        metric("target_met", m.target_met),
        metric("flops", flops),
        metric("bytes", nbytes),
    ]
    if conf.peak:
        metrics += roofline_metrics(ctx, conf.device, dtype, flops, nbytes, gflops, gbps, extra)
    if spec.compare_to:
        metrics.append(metric("compare_to", spec.compare_to))
    return metrics
