"""A user LR schedule: linear warm-up over the first epochs, then constant.

d5pipe builds it as ``linear_warmup(optimizer=..., **arguments)`` and steps it once per epoch.
"""

from __future__ import annotations

import torch


def linear_warmup(optimizer: torch.optim.Optimizer, warmup_epochs: int = 1) -> torch.optim.lr_scheduler.LambdaLR:
    """Factor ``(epoch + 1) / (warmup_epochs + 1)`` until the warm-up ends, then 1."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: min(1.0, (epoch + 1) / (warmup_epochs + 1)))
