"""What an operator is to level 0: inputs, implementation, float64 reference, FLOPs and bytes.

Custom operators (config ``operators.custom``) are instances of :class:`OperatorSpec` too. A
custom operator that re-implements a built-in names it in ``compare_to`` (``"matmul"``): the
point reports it (metric ``compare_to``) so the two can be paired, and when the spec gives no
``reference`` (or no ``make_inputs``/``flops``/``min_bytes``) the built-in's is used.

A user operator for other frameworks (``operators.framework``) gives its implementation there in
``frameworks``: ``{"jax": fn, ...}``, each ``fn`` a function of that framework's arrays in
PyTorch's layout (d5pipe.levels.level0.frameworks; ONNX Runtime's builds a graph). On a framework
it does not name the point is skipped, never run on another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    make_inputs: Callable[[int, int, torch.Generator], Inputs] | None
    """``make_inputs(size, batch, gen)``; None: the ``compare_to`` built-in's."""
    forward: Callable[..., torch.Tensor] | None
    """The PyTorch implementation under test (eager; level 0 wraps it in ``torch.compile`` for
    impl=compile); None: the operator has none (a PyTorch point of it is skipped)."""
    reference: Callable[..., torch.Tensor] | None
    """A float64 reference, differentiable by autograd, written independently where practical;
    None: the ``compare_to`` built-in's."""
    flops: Callable[[int, int], int] | None
    """Analytic floating-point operations of one forward call for ``(size, batch)``."""
    min_bytes: Callable[[int, int, int], int] | None
    """Minimum bytes moved for ``(size, batch, itemsize)``: every input read once, output written once."""
    layouts: Mapping[str, LayoutFn] = field(default_factory=lambda: {"contiguous": keep_layout})
    """Memory layouts this operator supports; each maps built inputs to inputs in that layout."""
    description: str = ""
    compare_to: str = ""
    """The built-in operator this one re-implements (``matmul``), or empty."""
    frameworks: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Implementations in other frameworks, by ``operators.framework`` name (module docstring)."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """What made the implementation, recorded with every point of it: a compiled operator's build
    (d5pipe.levels.level0.compiled); empty for Python code (its source is in ``RUN/code/``)."""
