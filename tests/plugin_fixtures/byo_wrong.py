"""Deliberately wrong user plug-ins (tests/test_verification.py, tests/test_level2_sanity.py): each
must come out ``fail``.

Importable as ``byo_wrong`` with ``tests/plugin_fixtures`` on ``sys.path`` and ``byo_wrong`` in
the runner's allow-list.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from d5pipe.levels.level0.spec import OperatorSpec


class LeakyMLP(nn.Module):
    """Claims to be the built-in mlp (same parameter names) but uses LeakyReLU(0.1)."""

    def __init__(self, input_shape: tuple[int, ...], n_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.LeakyReLU(0.1),
                                 nn.Linear(hidden, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class ScaledMLP(LeakyMLP):
    """The built-in mlp with every output off by a relative ``error`` (a systematic 1% bug)."""

    def __init__(self, input_shape: tuple[int, ...], n_classes: int, hidden: int = 64, error: float = 0.01) -> None:
        super().__init__(input_shape, n_classes, hidden)
        self.net[2] = nn.ReLU()
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * (1.0 + self.error)


class SignMomentumSGD(torch.optim.Optimizer):
    """SGD with momentum and a sign error: ``v = momentum * v - g``."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "v" not in state:
                    state["v"] = p.grad.clone()
                else:
                    state["v"].mul_(group["momentum"]).sub_(p.grad)
                p.add_(state["v"], alpha=-group["lr"])
        return None


class FlippedLion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023) with the sign of its update flipped: ``p += lr * sign(...)``, so it
    climbs the loss (the training loss rises every epoch, accuracy ends below chance)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                update = (m * beta1 + p.grad * (1.0 - beta1)).sign_()
                p.add_(update, alpha=+group["lr"])  # the bug: Lion subtracts
                m.mul_(beta2).add_(p.grad, alpha=1.0 - beta2)
        return None


def lr_off_sgd(params: Iterable[torch.nn.Parameter], lr: float, momentum: float, error: float = 0.01) -> torch.optim.SGD:
    """torch's SGD with a learning rate off by a relative ``error`` (every update 1% too large)."""
    return torch.optim.SGD(params, lr=lr * (1.0 + error), momentum=momentum)


class _BadGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.transpose(-1, -2), 1.01 * (a.transpose(-1, -2) @ grad)  # gradient of b 1% too large


def bad_backward_matmul() -> OperatorSpec:
    """A matmul whose forward is right and whose backward is 1% off for B."""
    def forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _BadGrad.apply(a, b)
        return out

    return OperatorSpec(name="bad_backward", make_inputs=None, forward=forward, reference=None, flops=None,
                        min_bytes=None, compare_to="matmul")
