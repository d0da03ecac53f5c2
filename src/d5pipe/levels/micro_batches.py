"""Micro-batching (``train.micro_batches`` at level 2, ``level1.micro_batches`` at level 1): one
batch's forward and backward in ``k`` micro-batches whose gradients accumulate (before the
optimizer step, at level 2), and the check that the accumulated gradient is the batch's.

Each micro-batch's mean loss is weighted by its share of the batch, so the accumulated gradient is
the gradient of the batch's mean loss -- for layers that treat samples independently. A layer that
couples the samples of a batch (BatchNorm's batch statistics) computes something else per
micro-batch; :func:`check` compares the two gradients on the point's first batch, before anything
is measured, and its verdict fails when they differ by more than the level's
``micro_batch_tolerance``.
Dropout layers are idle during the comparison: they draw other masks for other batch shapes, which
is a difference in the random draw, not in the mathematics.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from d5pipe.core.outcome import Metric, declared_metric
from d5pipe.levels.verify import DEFAULT_DETECT, FAIL, MICRO_BATCH_METRICS, UNDETECTABLE, relative_divergence, verdict


def split(xb: torch.Tensor, yb: torch.Tensor, k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batch in ``k`` contiguous micro-batches (sizes differ by at most one; none empty)."""
    return [(x, y) for x, y in zip(torch.tensor_split(xb, k), torch.tensor_split(yb, k), strict=True) if len(y)]


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(outputs, labels) -> the mean loss of those samples."""


def backward(model: Callable[[torch.Tensor], torch.Tensor], loss_fn: Loss, xb: torch.Tensor, yb: torch.Tensor,
             k: int) -> torch.Tensor:
    """Forward and backward of one batch in ``k`` micro-batches (gradients accumulate in
    ``.grad``); returns the batch's mean loss, detached. ``k = 1`` is the plain step."""
    if k == 1:
        loss = loss_fn(model(xb), yb)
        loss.backward()
        return loss.detach()
    n = len(yb)
    total = torch.zeros((), device=yb.device)
    for x, y in split(xb, yb, k):
        loss = loss_fn(model(x), y) * (len(y) / n)
        loss.backward()
        total = total + loss.detach()
    return total


def cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss levels 1 and 2 train with (outputs in float32 whatever the network's precision)."""
    return nn.functional.cross_entropy(out.float(), y)


def _gradient(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, k: int) -> torch.Tensor:
    """The flattened gradient of a float64 copy of ``model`` (train mode, dropout idle) on one
    batch: the check is of the mathematics, not of the network's precision (a bfloat16 network's
    own rounding would hide what it looks for)."""
    twin = copy.deepcopy(model).to(torch.float64)
    xb = xb.to(torch.float64) if xb.is_floating_point() else xb
    twin.train()
    for module in twin.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.eval()
    twin.zero_grad(set_to_none=True)
    backward(twin, cross_entropy, xb, yb, k)
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
                      for p in twin.parameters()])


def check(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, k: int, tolerance: float,
          detect: float = DEFAULT_DETECT) -> tuple[list[Metric], dict[str, Any]]:
    """``micro_batch_check`` (pass, fail or undetectable: d5pipe.levels.verify.verdict) and
    ``micro_batch_grad_rel_error``: the relative L2 error of the gradient accumulated over ``k``
    micro-batches of ``xb`` against the full batch's."""
    full = _gradient(model, xb, yb, 1)
    accumulated = _gradient(model, xb, yb, k)
    error = relative_divergence(accumulated.cpu(), full.cpu(), 0.0)  # from zero: ||acc - full|| / ||full||
    said = verdict(error, tolerance, detect)
    detail = (f"gradient of {k} micro-batches of the point's first batch ({len(yb)} samples) against the full batch's: "
              f"relative L2 error {error:.3g} {'>' if said == FAIL else '<='} {tolerance:g}")
    if said == UNDETECTABLE:
        detail += f" (a tolerance of {tolerance:g} cannot see a {detect:g} error)"
    if said == FAIL:
        detail += " (a layer couples the samples of a batch, e.g. BatchNorm: micro-batches compute something else)"
    metrics = [declared_metric(MICRO_BATCH_METRICS, "micro_batch_check", said, detail=detail),
               declared_metric(MICRO_BATCH_METRICS, "micro_batch_grad_rel_error", error)]
    return metrics, {"micro_batches": k, "batch": len(yb), "rel_error": error, "tolerance": tolerance,
                     "dropout": "idle during the comparison"}
