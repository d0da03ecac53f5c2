"""A user metric: balanced accuracy (mean per-class recall) on the test split.

d5pipe calls ``balanced_accuracy(model, x_test, y_test)`` after training (eval mode, no grad);
the returned number becomes the metric ``balanced_accuracy`` of the point.
"""

from __future__ import annotations

import torch


def balanced_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean over the classes present in ``y`` of the fraction of their samples predicted right."""
    pred = model(x).argmax(dim=1)
    recalls = [float((pred[y == c] == c).float().mean()) for c in torch.unique(y).tolist()]
    return sum(recalls) / len(recalls)
