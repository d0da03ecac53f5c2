"""Deliberately broken operators, for checking that level 0's correctness checks catch bugs.

Register them through the config like any user operator (they are under the default allowed
prefix ``d5pipe.``)::

    operators:
      op: matmul_wrong_forward
      custom: {matmul_wrong_forward: "d5pipe.levels.level0.testing_ops:MATMUL_WRONG_FORWARD"}

* ``MATMUL_WRONG_FORWARD``: an off-by-one bug; the last term of every inner product is dropped.
* ``MATMUL_WRONG_BACKWARD``: correct forward, but the gradient of B forgets a transpose.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from d5pipe.levels.level0.operators import MATMUL


def _matmul_off_by_one(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[..., :-1] @ b[..., :-1, :]


class _MatmulBadGrad(torch.autograd.Function):
    """``a @ b`` whose backward returns ``a @ g`` instead of ``a^T @ g`` for the gradient of ``b``."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.transpose(-1, -2), a @ grad


def _matmul_bad_grad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _MatmulBadGrad.apply(a, b)
    return out


def _square_matmul_inputs(n: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Square operands (the wrong gradient ``a @ g`` only has the right shape for square a)."""
    return [torch.randn(n, n, generator=gen, dtype=torch.float64) for _ in range(2)]


MATMUL_WRONG_FORWARD = dataclasses.replace(
    MATMUL, name="matmul_wrong_forward", forward=_matmul_off_by_one, make_inputs=_square_matmul_inputs,
    flops=lambda n, b: 2 * n**3, min_bytes=lambda n, b, s: s * 3 * n * n,
)
MATMUL_WRONG_BACKWARD = dataclasses.replace(
    MATMUL, name="matmul_wrong_backward", forward=_matmul_bad_grad, make_inputs=_square_matmul_inputs,
    flops=lambda n, b: 2 * n**3, min_bytes=lambda n, b, s: s * 3 * n * n,
)
