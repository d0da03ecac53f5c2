"""Model FLOPs, counted, and what share of the machine's measured peak a rate reaches.

:func:`count_flops` runs a callable once under ``torch.utils.flop_counter.FlopCounterMode`` and
returns the floating-point operations it performed. The counter covers the operators torch has
formulas for (matmul, linear, convolution, attention, their backward passes); elementwise work
(activations, normalisation, the loss) is not counted, so the count and the "% of peak" built on
it are lower bounds of the work done and of the share of peak reached. Levels 1-3 report
``flops_per_sample`` next to their throughput and, with a measured peak
(d5pipe.measure.peak), ``achieved_flops`` and ``pct_of_peak_flops``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from d5pipe.core.outcome import Declared, Metric, declared_metric

if TYPE_CHECKING:  # torch: the declarations (flop_declared) import without it
    from d5pipe.measure.peak import Peak

FLOPS_NOTE = ("FLOPs counted by torch.utils.flop_counter.FlopCounterMode (matmul, convolution, attention and "
              "their backward); elementwise work is not counted, so FLOP/s and % of peak are lower bounds")


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of one call of ``fn`` (see the module docstring)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def training_step_flops(model: Any, x: Any, y: Any) -> int:
    """FLOPs of one forward + cross-entropy + backward of a copy of ``model`` on the batch ``(x, y)``
    (the optimizer's elementwise update is not counted); ``model`` itself is left untouched."""
    import torch

    clone = copy.deepcopy(model).train()

    def step() -> None:
        torch.nn.functional.cross_entropy(clone(x).float(), y).backward()

    return count_flops(step)


def safe_count(fn: Callable[[], int], warnings: list[str]) -> int | None:
    """``fn()``; None, with a warning appended, when the FLOP counter cannot run the model."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        warnings.append(f"FLOPs not counted: {type(exc).__name__}: {text}")
        return None


def flop_metrics(suffix: str, flops_per_sample: float, throughput: Metric, peak: Peak | None) -> list[Metric]:
    """``flops_per_sample{suffix}``, ``gflops{suffix}`` (the throughput metric, samples/s, times
    the FLOPs per sample, CI carried through) and, with a measured ``peak``, ``peak_gflops`` and
    ``pct_peak_flops{suffix}`` (against the best measured matmul rate in the same dtype)."""
    scale = float(flops_per_sample) / 1e9

    def scaled(v: object) -> float | None:
        return None if v is None else float(v) * scale  # type: ignore[arg-type]

    rate = scaled(throughput.value)
    declared = flop_declared(suffix, throughput.name, throughput.samples)
    out = [
        declared_metric(declared, f"flops_per_sample{suffix}", float(flops_per_sample)),
        declared_metric(declared, f"gflops{suffix}", math.nan if rate is None else rate,
                        ci=(scaled(throughput.ci_low), scaled(throughput.ci_high))),
    ]
    if peak is not None and peak.best > 0 and rate is not None:
        out.append(declared_metric(declared, "peak_gflops", peak.best / 1e9))
        out.append(declared_metric(declared, f"pct_peak_flops{suffix}", 100.0 * rate / (peak.best / 1e9)))
    return out


def flop_declared(suffix: str, throughput: str, samples: str | None) -> dict[str, Declared]:
    """The declarations of :func:`flop_metrics`' names for ``suffix``, beside the rate ``throughput``
    (samples/s) whose raw samples are ``samples``."""
    return {
        f"flops_per_sample{suffix}": Declared("FLOP", "deterministic", None, "model FLOPs per sample, counted "
                                              "(matmul, convolution, attention; a lower bound)"),
        f"gflops{suffix}": Declared("GFLOP/s", "timing", samples, f"achieved: {throughput} x flops_per_sample{suffix}"),
        "peak_gflops": Declared("GFLOP/s", "info", None, "the machine's measured matmul peak in the same dtype"),
        f"pct_peak_flops{suffix}": Declared("%", "info", None, f"gflops{suffix} as a share of peak_gflops"),
    }
