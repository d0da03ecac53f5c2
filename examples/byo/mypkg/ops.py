"""A user level-0 operator: GEMM written with ``torch.einsum``, benchmarked against ``matmul``.

d5pipe calls ``einsum_matmul()`` and gets an OperatorSpec. It names the built-in it
re-implements (``compare_to="matmul"``) and leaves out what it shares with it: the inputs, the
float64 reference, the FLOP and byte counts are the built-in's, so the two points measure the
same problem and are checked against the same reference (forward and gradients).
"""

from __future__ import annotations

import torch

from d5pipe.levels.level0.spec import OperatorSpec


def _einsum_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ik,kj->ij", a, b)


def einsum_matmul() -> OperatorSpec:
    """The spec of the einsum GEMM."""
    return OperatorSpec(name="einsum_matmul", make_inputs=None, forward=_einsum_matmul, reference=None,
                        flops=None, min_bytes=None, compare_to="matmul",
                        description="GEMM (b*n x n) @ (n x n) with torch.einsum")
