"""An operator point's metrics: what each name means (:data:`OPERATOR_METRICS`, the level's
``Level.metrics``; docs/reference/metrics.md and the report read it) and :func:`metric`, which builds
a metric as declared. PyTorch's point (d5pipe.levels.level0.point) and a framework's
(framework_point) report the same names. Torch-free."""

from __future__ import annotations

from functools import partial

from d5pipe.core.outcome import Declared, declared_metric
from d5pipe.measure.energy import energy_declared
from d5pipe.measure.stats import timing_declared


def _check(prefix: str, verdict: str, what: str) -> dict[str, Declared]:
    return {verdict: Declared("", "verdict", None, f"{what} against the float64 reference: pass when err_l2 and "
                                                    "err_max_rel are within the tolerance (operators.tol_*)"),
            f"{prefix}err_l2": Declared("", "numerical", None, f"{what}: relative L2 error against the reference"),
            f"{prefix}err_max_abs": Declared("", "numerical", None, f"{what}: largest absolute error"),
            f"{prefix}err_max_rel": Declared("", "numerical", None, f"{what}: largest relative error")}


OPERATOR_METRICS: dict[str, Declared] = {
    **timing_declared("time", "s", "time", "one forward call: median [95% CI] of the timer's samples", ""),
    **timing_declared("time_bwd", "s", "time_bwd", "the backward alone (operators.time_backward; PyTorch only): "
                      "median [95% CI]", "bwd_"),
    **timing_declared("time_fwd_bwd", "s", "time_fwd_bwd", "a forward call and its backward: median [95% CI]",
                      "fwd_bwd_"),
    "compile_s": Declared("s", "info", None, "the first call of a compiled operator (torch.compile) or a "
                                             "framework's preparation, never timed with it"),
    "gflops": Declared("GFLOP/s", "timing", "time", "the operator's FLOPs over the median time, CI carried through"),
    "gbps": Declared("GB/s", "timing", "time", "the least bytes the operator must move over the median time"),
    "target_met": Declared("", "info", None, "whether the timer reached timer.target_ci_pct within its budget"),
    "flops": Declared("FLOP", "deterministic", None, "floating-point operations of one call (the operator's formula)"),
    "bytes": Declared("B", "deterministic", None, "the least bytes one call reads and writes"),
    "peak_gflops": Declared("GFLOP/s", "info", None, "operators.peak: the machine's measured FLOP ceiling in the dtype"),
    "pct_peak_flops": Declared("%", "info", None, "gflops as a share of peak_gflops"),
    "peak_gbps": Declared("GB/s", "info", None, "the measured bandwidth of the memory level the working set fits"),
    "pct_peak_bw": Declared("%", "info", None, "gbps as a share of peak_gbps"),
    "bound_gflops": Declared("GFLOP/s", "info", None, "the roofline bound: min(peak_gflops, intensity x peak_gbps)"),
    "pct_of_bound": Declared("%", "info", None, "gflops as a share of bound_gflops (gbps of peak_gbps without FLOPs)"),
    "memory_level": Declared("", "info", None, "the memory level the working set fits (L1, L2, ..., DRAM)"),
    "compare_to": Declared("", "info", None, "the built-in operator a user operator re-implements"),
    **energy_declared("call", "", "the timed forward calls"),
    **_check("", "correctness", "the forward output"),
    **_check("grad_", "grad_check", "the input gradients (operators.check_backward)"),
}
"""Every metric name of an operator point and its one meaning."""


metric = partial(declared_metric, OPERATOR_METRICS)
"""``metric(name, value, kind=None, ci=None, detail=None)``: ``name``'s Metric as :data:`OPERATOR_METRICS`
declares it."""
