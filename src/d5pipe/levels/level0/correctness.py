"""Correctness of an operator implementation against its float64 reference: runs the
implementation and the reference on the same, already rounded, inputs (forward, and the gradients
of every input for one seeded upstream gradient). The error measures, the tolerances per dtype
(check kind ``operator``; gradients twice those) and the verdict are d5pipe.levels.verify's;
``operators.tol_l2`` and ``operators.tol_max_rel`` replace the table's values for a point.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from d5pipe.levels.verify import GRAD_TOLERANCE_FACTOR, ErrorReport, compare, tolerance, worst


def check_forward(
    impl: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    ref_inputs: list[torch.Tensor],
    dtype: torch.dtype,
    tol: tuple[float | None, float | None] = (None, None),
) -> ErrorReport:
    """Run the implementation and the float64 reference once and compare the outputs."""
    tol_l2, tol_max = tolerance("operator", dtype, *tol)
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
    tol_l2, tol_max = tolerance("operator", dtype, *tol)
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
