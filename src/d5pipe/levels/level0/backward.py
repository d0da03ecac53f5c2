"""Level 0 backward timings: the backward pass alone and forward+backward, as separate metrics.

* ``time_bwd``: ``torch.autograd.grad(out, inputs, upstream, retain_graph=True)`` on one recorded
  forward graph, repeated -- the backward kernels only;
* ``time_fwd_bwd``: a forward call and its backward, per repetition.

Both use the shared timer (d5pipe.measure.timer, device-synchronised, raw samples kept) with the
point's timer settings, on the point's inputs (dtype, device, layout) made differentiable, and one
seeded upstream gradient. The forward time stays ``time``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from d5pipe.measure.timer import Measurement, measure


def time_backward(
    fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], timer_cfg: Mapping[str, Any] | None,
    device: str, gen: torch.Generator,
) -> tuple[Measurement, Measurement]:
    """``(backward, forward+backward)`` measurements (see the module docstring)."""
    ins = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*ins)
    upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(device=out.device, dtype=out.dtype)
    torch.autograd.grad(out, ins, upstream, retain_graph=True)  # raises here when there is no backward

    def bwd() -> None:
        torch.autograd.grad(out, ins, upstream, retain_graph=True)

    def fwd_bwd() -> None:
        torch.autograd.grad(fn(*ins), ins, upstream)

    return measure(bwd, timer_cfg, device), measure(fwd_bwd, timer_cfg, device)
