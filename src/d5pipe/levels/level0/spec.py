"""What an operator is to level 0: inputs, implementation, float64 reference, FLOPs and bytes.

Custom operators (config ``operators.custom``) are instances of :class:`OperatorSpec` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

Inputs = list[torch.Tensor]
LayoutFn = Callable[[Inputs], Inputs]


def keep_layout(inputs: Inputs) -> Inputs:
    """The ``contiguous`` layout: inputs as built."""
    return inputs


@dataclass(frozen=True)
class OperatorSpec:
    """One benchmarkable operator.

    ``make_inputs(size, batch, gen)`` returns float64 CPU tensors drawn from ``gen``; level 0 rounds
    them to the point's dtype, and the reference sees the *rounded* values upcast to float64, so
    input rounding is not counted as error. All inputs are differentiable.
    """

    name: str
    make_inputs: Callable[[int, int, torch.Generator], Inputs]
    forward: Callable[..., torch.Tensor]
    """The implementation under test (eager; level 0 wraps it in ``torch.compile`` for impl=compile)."""
    reference: Callable[..., torch.Tensor]
    """A float64 reference, differentiable by autograd, written independently where practical."""
    flops: Callable[[int, int], int]
    """Analytic floating-point operations of one forward call for ``(size, batch)``."""
    min_bytes: Callable[[int, int, int], int]
    """Minimum bytes moved for ``(size, batch, itemsize)``: every input read once, output written once."""
    layouts: Mapping[str, LayoutFn] = field(default_factory=lambda: {"contiguous": keep_layout})
    """Memory layouts this operator supports; each maps built inputs to inputs in that layout."""
    description: str = ""


def elements(inputs: Inputs) -> int:
    return sum(int(t.numel()) for t in inputs)
