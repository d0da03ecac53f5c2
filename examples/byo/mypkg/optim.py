"""A user optimizer: SGD with momentum written out, to be checked against the built-in ``sgd``.

d5pipe builds it as ``MomentumSGD(params=..., **arguments)``; the experiment names ``sgd`` as its
``train.reference_optimizer``, so level 2 trains both from the same weights on the same batches
and reports how far they drift apart (``optimizer_check``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class MomentumSGD(torch.optim.Optimizer):
    """PyTorch's SGD rule: ``v = momentum * v + g`` (``v = g`` at the first step), ``p -= lr * v``."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = p.grad.clone()
                else:
                    state["velocity"].mul_(group["momentum"]).add_(p.grad)
                p.add_(state["velocity"], alpha=-group["lr"])
        return loss
