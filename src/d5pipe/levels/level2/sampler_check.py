"""Checks of a sampler before it orders a training run (after Deep500's sampler validation).

Each is a verdict row of the point (a ``fail`` fails it) with the evidence in its detail:

* ``sampler_once_per_epoch``: one epoch draws every training sample exactly once (a sampler
  without replacement); the detail counts the repeated, the never drawn and the out-of-range ones;
* ``sampler_class_histogram``: the classes of one epoch's samples follow the dataset's class
  histogram: Pearson's chi-square test of the epoch's class counts against the dataset's
  proportions fails below ``train.sampler_alpha`` (``sampler_histogram_p`` is the p-value);
* ``sampler_seeded_order``: two samplers built with the same seed give the same first epoch.

Two samplers are built (the second only for the order check) and one epoch drawn from each: the
cost of drawing ``2 n`` indices, none of the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from scipy.stats import chisquare

from d5pipe.core.outcome import Metric
from d5pipe.levels.level2.metrics import metric
from d5pipe.levels.verify import FAIL, passed

SamplerFactory = Callable[[int], Iterable[int]]
"""``factory(seed)``: a fresh sampler whose generator is seeded with ``seed``."""


def _epoch(sampler: Iterable[int]) -> np.ndarray:
    return np.fromiter((int(i) for i in sampler), dtype=np.int64)


def once_per_epoch(epoch: np.ndarray, n: int) -> tuple[str, str]:
    """(verdict, detail): every index of ``range(n)`` drawn exactly once."""
    outside = int(((epoch < 0) | (epoch >= n)).sum())
    counts = np.bincount(epoch[(epoch >= 0) & (epoch < n)], minlength=n)
    repeated, missing = int((counts > 1).sum()), int((counts == 0).sum())
    ok = outside == 0 and repeated == 0 and missing == 0 and len(epoch) == n
    detail = (f"{len(epoch)} indices drawn for {n} samples: {repeated} drawn more than once, "
              f"{missing} never, {outside} out of range")
    return passed(ok), detail


def class_histogram(epoch: np.ndarray, labels: np.ndarray, n_classes: int, alpha: float) -> tuple[str, float, str]:
    """(verdict, p, detail): the epoch's class counts against the dataset's class proportions."""
    valid = epoch[(epoch >= 0) & (epoch < len(labels))]
    if len(valid) == 0:
        return FAIL, float("nan"), "the epoch drew no valid index"
    expected_share = np.bincount(labels, minlength=n_classes) / len(labels)
    observed = np.bincount(labels[valid], minlength=n_classes)
    present = expected_share > 0
    if observed[~present].any():
        return FAIL, 0.0, "the epoch drew classes the dataset does not have"
    p = float(chisquare(observed[present], expected_share[present] * len(valid)).pvalue) if present.sum() > 1 else 1.0
    worst = int(np.argmax(np.abs(observed / len(valid) - expected_share)))
    detail = (f"chi-square p = {p:.3g} (fails below {alpha:g}); class {worst}: {observed[worst] / len(valid):.3f} "
              f"of the epoch, {expected_share[worst]:.3f} of the dataset")
    return passed(p >= alpha), p, detail


def check_sampler(factory: SamplerFactory, labels: torch.Tensor, seed: int, n_classes: int,
                  alpha: float) -> tuple[list[Metric], dict[str, Any]]:
    """The three verdicts and ``sampler_histogram_p``, and what each measured (for the record)."""
    y = labels.detach().cpu().numpy().astype(np.int64)
    first = _epoch(factory(seed))
    again = _epoch(factory(seed))
    once, once_detail = once_per_epoch(first, len(y))
    hist, p, hist_detail = class_histogram(first, y, n_classes, alpha)
    same = len(first) == len(again) and bool((first == again).all())
    order_detail = ("the same order" if same else
                    f"the first difference at position {int(np.argmax(first[:len(again)] != again[:len(first)]))}"
                    if len(first) == len(again) else f"{len(first)} against {len(again)} indices")
    metrics = [
        metric("sampler_once_per_epoch", once, detail=once_detail),
        metric("sampler_class_histogram", hist, detail=hist_detail),
        metric("sampler_histogram_p", p),
        metric("sampler_seeded_order", passed(same), detail=f"two samplers seeded alike: {order_detail}"),
    ]
    extra = {"once_per_epoch": once_detail, "class_histogram": hist_detail, "seeded_order": order_detail,
             "alpha": alpha, "epoch_length": len(first)}
    return metrics, extra
