"""Correctness of an operator implementation against its float64 reference.

Error measures (``out`` = implementation result upcast to float64, ``ref`` = float64 reference on
the same, already rounded, inputs):

* ``err_l2``      = ||out - ref||_2 / ||ref||_2   (relative L2 error)
* ``err_max_abs`` = max |out - ref|
* ``err_max_rel`` = max |out - ref| / max |ref|   (max error relative to the output's scale; an
  element-wise relative error is meaningless where ``ref`` is near zero)

Verdict ``pass`` when both ``err_l2 <= l2`` and ``err_max_rel <= max_rel`` of the dtype's tolerance
below, ``fail`` otherwise (also for NaN/inf outputs or shape mismatches). Tolerances are about
10x / 40x the unit roundoff u of the dtype for low precision (output rounding alone gives
~u/sqrt(3) relative L2 error; accumulation in float32 inside the kernels keeps the rest small),
and fixed small values for float32/float64. Gradients (``grad_check``) use twice these tolerances,
checked on every input's gradient for one seeded upstream gradient. ``operators.tol_l2`` and
``operators.tol_max_rel`` replace the table's values for a point (gradients: twice those).

=========  ========  =========
dtype      l2        max_rel
=========  ========  =========
float64    1e-10     1e-9
float32    1e-5      1e-4
float16    5e-3      2e-2
bfloat16   4e-2      1.6e-1
=========  ========  =========
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-9),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (5e-3, 2e-2),
    torch.bfloat16: (4e-2, 1.6e-1),
}
GRAD_TOLERANCE_FACTOR = 2.0


@dataclass(frozen=True)
class ErrorReport:
    """Errors of one tensor against its reference, and the verdict."""

    err_l2: float
    err_max_abs: float
    err_max_rel: float
    tol_l2: float
    tol_max_rel: float
    passed: bool
    note: str = ""

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"


def compare(out: torch.Tensor, ref: torch.Tensor, tol_l2: float, tol_max_rel: float) -> ErrorReport:
    """Errors of ``out`` against the float64 ``ref`` and whether they are within tolerance."""
    if tuple(out.shape) != tuple(ref.shape):
        return ErrorReport(math.nan, math.nan, math.nan, tol_l2, tol_max_rel, False,
                           f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    out64 = out.detach().to(device="cpu", dtype=torch.float64)
    ref64 = ref.detach().to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(out64).all()):
        return ErrorReport(math.inf, math.inf, math.inf, tol_l2, tol_max_rel, False, "non-finite output")
    diff = out64 - ref64
    ref_norm = float(torch.linalg.vector_norm(ref64))
    ref_max = float(ref64.abs().max()) if ref64.numel() else 0.0
    err_norm = float(torch.linalg.vector_norm(diff))
    err_max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    err_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    err_max_rel = err_max_abs / ref_max if ref_max > 0 else (0.0 if err_max_abs == 0 else math.inf)
    passed = err_l2 <= tol_l2 and err_max_rel <= tol_max_rel
    return ErrorReport(err_l2, err_max_abs, err_max_rel, tol_l2, tol_max_rel, passed)


def worst(reports: list[ErrorReport]) -> ErrorReport:
    """One report for several tensors: the largest errors, failing if any fails."""
    if not reports:
        raise ValueError("no reports")
    notes = "; ".join(r.note for r in reports if r.note)
    return ErrorReport(
        max(r.err_l2 for r in reports),
        max(r.err_max_abs for r in reports),
        max(r.err_max_rel for r in reports),
        reports[0].tol_l2,
        reports[0].tol_max_rel,
        all(r.passed for r in reports),
        notes,
    )


def tolerance(dtype: torch.dtype, l2: float | None = None, max_rel: float | None = None,
              table: dict[torch.dtype, tuple[float, float]] = TOLERANCES) -> tuple[float, float]:
    """The dtype's ``(l2, max_rel)`` tolerance in ``table`` (level 1's networks: d5pipe.levels.verify);
    ``l2``/``max_rel`` (``operators.tol_l2`` / ``tol_max_rel``) override it for one point."""
    d_l2, d_max = table[dtype]
    return (d_l2 if l2 is None else float(l2)), (d_max if max_rel is None else float(max_rel))


def check_forward(
    impl: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    ref_inputs: list[torch.Tensor],
    dtype: torch.dtype,
    tol: tuple[float | None, float | None] = (None, None),
) -> ErrorReport:
    """Run the implementation and the float64 reference once and compare the outputs."""
    tol_l2, tol_max = tolerance(dtype, *tol)
    out = impl(*inputs)  # inputs do not require grad; no no_grad() so a compiled impl is not recompiled
    with torch.no_grad():
        ref = reference(*ref_inputs)
    return compare(out, ref, tol_l2, tol_max)


def check_backward(
    impl: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    ref_inputs: list[torch.Tensor],
    dtype: torch.dtype,
    gen: torch.Generator,
    tol: tuple[float | None, float | None] = (None, None),
) -> ErrorReport:
    """Gradients of the implementation vs autograd of the float64 reference, for all inputs.

    The upstream gradient is drawn from ``gen`` in float64 and rounded to ``dtype`` for the
    implementation; the reference sees the rounded values too.
    """
    tol_l2, tol_max = tolerance(dtype, *tol)
    tol_l2, tol_max = tol_l2 * GRAD_TOLERANCE_FACTOR, tol_max * GRAD_TOLERANCE_FACTOR
    ins = [t.detach().clone().requires_grad_(True) for t in inputs]
    refs = [t.detach().clone().requires_grad_(True) for t in ref_inputs]
    ref_out = reference(*refs)
    upstream = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64).to(dtype)
    ref_grads = torch.autograd.grad(ref_out, refs, upstream.to(torch.float64))
    out = impl(*ins)
    if tuple(out.shape) != tuple(ref_out.shape):
        return ErrorReport(math.nan, math.nan, math.nan, tol_l2, tol_max, False,
                           f"output shape {tuple(out.shape)} != reference {tuple(ref_out.shape)}")
    grads = torch.autograd.grad(out, ins, upstream.to(out.device), allow_unused=True)
    reports = []
    for i, (g, rg) in enumerate(zip(grads, ref_grads, strict=True)):
        if g is None:
            reports.append(ErrorReport(math.inf, math.inf, math.inf, tol_l2, tol_max, False,
                                       f"input {i} got no gradient"))
        else:
            reports.append(compare(g, rg, tol_l2, tol_max))
    return worst(reports)
