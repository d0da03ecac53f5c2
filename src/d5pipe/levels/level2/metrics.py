"""Extra metrics of a training point (``train.metrics``): built-ins and user targets, one path.

Each entry is a built-in name (``macro_f1``) or a target (d5pipe.levels.targets) called after
training as ``fn(model, x_test, y_test)`` with the model in eval mode under ``torch.no_grad`` and
the test split on the model's device. It returns a number (metric named after the function) or a
mapping ``name -> number``; each becomes a ``numerical`` metric (compared with a tolerance by
``d5pipe reproduce``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from d5pipe.core.allowlist import TARGET_KEY
from d5pipe.core.errors import D5PipeError
from d5pipe.core.outcome import Metric
from d5pipe.levels.targets import metric_targets


def macro_f1(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Unweighted mean over classes of the F1 score on ``x, y`` (a built-in extra metric)."""
    pred = model(x).argmax(dim=1)
    scores = []
    for c in torch.unique(y).tolist():
        tp = float(((pred == c) & (y == c)).sum())
        fp = float(((pred == c) & (y != c)).sum())
        fn = float(((pred != c) & (y == c)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0)
    return sum(scores) / len(scores)


def extra_metrics(train_cfg: dict[str, Any], model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[Metric]:
    """The metrics of every ``train.metrics`` entry (see the module docstring)."""
    from d5pipe.levels.instantiate import build

    out: list[Metric] = []
    model.eval()
    for key, target in metric_targets(train_cfg):
        with torch.no_grad():
            value = build(target, key, model, x, y)
        name = str(target[TARGET_KEY]).rsplit(".", 1)[-1]
        items = value.items() if isinstance(value, dict) else [(name, value)]
        for metric, v in items:
            try:
                number = float(v)
            except (TypeError, ValueError):
                raise D5PipeError(f"{key}: metric {metric!r} returned {v!r}, not a number") from None
            out.append(Metric(str(metric), number if math.isfinite(number) else math.nan, "", "numerical"))
    return out
