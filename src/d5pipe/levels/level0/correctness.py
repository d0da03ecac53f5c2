"""Correctness of an operator implementation against its float64 reference: runs the
implementation and the reference on the same, already rounded, inputs (forward, and the gradients
of every input for one seeded upstream gradient). The error measures, the tolerances per dtype
(check kind ``operator``; gradients twice those) and the verdict are d5pipe.levels.verify's;
``operators.tol_l2`` and ``operators.tol_max_rel`` replace the table's values for a point. Every
framework's point (d5pipe.levels.level0.frameworks) is held to the same reference through
:func:`forward_report` and :func:`gradients_report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from d5pipe.levels.verify import GRAD_TOLERANCE_FACTOR, ErrorReport, compare, tolerance, worst

Tol = tuple[float | None, float | None]


def forward_report(out: torch.Tensor, reference: Callable[..., torch.Tensor], ref_inputs: list[torch.Tensor],
                   dtype: torch.dtype, tol: Tol = (None, None)) -> ErrorReport:
    """An implementation's output against the float64 reference on ``ref_inputs``."""
    tol_l2, tol_max = tolerance("operator", dtype, *tol)
    with torch.no_grad():
        ref = reference(*ref_inputs)
    return compare(out, ref, tol_l2, tol_max)


def reference_gradients(reference: Callable[..., torch.Tensor], ref_inputs: list[torch.Tensor],
                        dtype: torch.dtype, gen: torch.Generator
                        ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """``(reference output, upstream gradient, reference gradients)``: the upstream gradient is
    drawn from ``gen`` in float64 and rounded to ``dtype``; the reference sees the rounded values."""
    refs = [t.detach().clone().requires_grad_(True) for t in ref_inputs]
    ref_out = reference(*refs)
    upstream = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64).to(dtype)
    return ref_out, upstream, torch.autograd.grad(ref_out, refs, upstream.to(torch.float64))


def gradients_report(out_shape: Sequence[int], ref_out: torch.Tensor, grads: Sequence[torch.Tensor | None],
                     ref_grads: Sequence[torch.Tensor], dtype: torch.dtype, tol: Tol = (None, None)) -> ErrorReport:
    """The implementation's gradients of every input against the reference's, at twice the forward
    tolerance (``GRAD_TOLERANCE_FACTOR``)."""
    tol_l2, tol_max = tolerance("operator", dtype, *tol)
    tol_l2, tol_max = tol_l2 * GRAD_TOLERANCE_FACTOR, tol_max * GRAD_TOLERANCE_FACTOR
    if tuple(out_shape) != tuple(ref_out.shape):
        return ErrorReport(math.nan, math.nan, math.nan, tol_l2, tol_max, False,
                           f"output shape {tuple(out_shape)} != reference {tuple(ref_out.shape)}")
    reports = []
    for i, (g, rg) in enumerate(zip(grads, ref_grads, strict=True)):
        if g is None:
            reports.append(ErrorReport(math.inf, math.inf, math.inf, tol_l2, tol_max, False,
                                       f"input {i} got no gradient"))
        else:
            reports.append(compare(g, rg, tol_l2, tol_max))
    return worst(reports)


def check_backward(
    impl: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    ref_inputs: list[torch.Tensor],
    dtype: torch.dtype,
    gen: torch.Generator,
    tol: Tol = (None, None),
) -> ErrorReport:
    """Gradients of the PyTorch implementation (autograd) vs autograd of the float64 reference, for all inputs."""
    ins = [t.detach().clone().requires_grad_(True) for t in inputs]
    ref_out, upstream, ref_grads = reference_gradients(reference, ref_inputs, dtype, gen)
    out = impl(*ins)
    if tuple(out.shape) != tuple(ref_out.shape):
        return gradients_report(out.shape, ref_out, [], ref_grads, dtype, tol)
    grads = torch.autograd.grad(out, ins, upstream.to(out.device), allow_unused=True)
    return gradients_report(out.shape, ref_out, grads, ref_grads, dtype, tol)
