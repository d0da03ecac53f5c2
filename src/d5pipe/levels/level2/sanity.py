"""Level 2 sanity checks that need no reference: training runs that cannot be a valid result.

A user optimizer with a flipped sign trains "successfully" (no exception, a number for every
metric) while its loss rises and its accuracy ends below chance. These rules catch such runs
without a reference optimizer. Each rule that trips adds a verdict row ``sanity:<rule>`` =
``fail`` to the point, with its evidence as the row's ``detail`` (the point's verdict is ``fail``;
the reason reads ``check sanity:not_diverged failed (...)`` in the report, ``d5pipe status`` and
the exit code). A rule that holds adds no row: like the plausibility checks
(d5pipe.results.plausibility), passing a sanity check is no evidence that the result is right,
so it never turns an ``unchecked`` point into a ``pass``. What each rule measured, and whether
it judged at all, is in the record's ``extra["sanity"]``.

* ``sanity:train_finite`` -- every step's training loss, every per-epoch value (train loss,
  train and test accuracy, test loss), every ``train.metrics`` value and every final weight is
  finite (no NaN, no inf).
* ``sanity:not_diverged`` -- the training loss did not clearly rise. With ``n`` steps and a
  window of ``w = max(5, ceil(n / 10))`` steps, ``start`` and ``end`` are the medians of the step
  losses of the first and of the last window; the rule fails when
  ``end > 1.25 * start`` **and** ``end - start > 0.1`` (nats of cross-entropy). Medians ignore
  a few spiky batches; 25% above the start is far outside a healthy run (whose loss at the end
  is well below its starting ~ln(n_classes)) and well inside what a sign error does (the loss
  grows every epoch); the absolute margin keeps tiny losses (1e-3 -> 2e-3) from tripping it.
  Judged from ``2 * 5 = 10`` steps on (fewer: windows of a step or two are noise) and only when
  every loss is finite (``train_finite`` covers the rest).
* ``sanity:above_chance`` -- the final test accuracy is above chance, ``1 / n_classes``. Judged
  only after at least 100 optimizer steps: a short run (a few steps of a test config) may
  legitimately still be at chance, while any working optimizer moves a small model well above
  chance in 100 steps. A run at or below chance after that learned nothing or unlearned.

The thresholds are constants of this module, not ``train.*`` options: a ``train`` key is part of
every level-2 (and level-3) point ID, so adding one would re-run every existing point.
Torch-free: the point hands in plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from d5pipe.core.outcome import Metric
from d5pipe.levels.verify import FAIL, PASS

PREFIX = "sanity:"
DIVERGENCE_RATIO = 1.25
"""``end`` above this multiple of ``start`` (and above it by :data:`DIVERGENCE_MIN_RISE`) fails."""
DIVERGENCE_MIN_RISE = 0.1
"""Smallest absolute rise of the loss (nats) that counts as divergence."""
WINDOW_FRACTION = 0.1
MIN_WINDOW = 5
"""Steps per window at least; fewer than ``2 * MIN_WINDOW`` steps are not judged."""
CHANCE_MIN_STEPS = 100
"""Optimizer steps before ``above_chance`` judges a run."""
NOT_JUDGED = "not judged"  # a rule with too little to go on; its other outcomes are d5pipe.levels.verify's


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome: ``pass``, ``fail`` or ``not judged``, why, and what it measured."""

    name: str
    verdict: str
    detail: str
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "detail": self.detail, **self.measured}


def _g(x: float) -> str:
    return f"{x:.4g}"


def finite_rule(step_losses: Sequence[float], curves: Mapping[str, Sequence[Any]],
                metrics: Mapping[str, float], weights_finite: bool) -> RuleResult:
    """``train_finite``: every step loss, per-epoch curve value, extra metric and weight finite."""
    bad: list[str] = []
    first = next((i for i, v in enumerate(step_losses) if not math.isfinite(v)), None)
    if first is not None:
        n_bad = sum(not math.isfinite(v) for v in step_losses)
        bad.append(f"training loss {step_losses[first]} at step {first} ({n_bad} of {len(step_losses)} steps)")
    for name in ("train_loss", "train_accuracy", "test_loss", "test_accuracy"):
        values = list(curves.get(name) or [])
        epoch = next((i for i, v in enumerate(values) if not math.isfinite(float(v))), None)
        if epoch is not None:
            bad.append(f"{name} {values[epoch]} after epoch {epoch + 1}")
    bad += [f"train.metrics {name} {value}" for name, value in metrics.items() if not math.isfinite(value)]
    if not weights_finite:
        bad.append("non-finite final weights")
    measured = {"steps": len(step_losses), "non_finite": bad}
    if bad:
        return RuleResult("train_finite", FAIL, "not finite: " + "; ".join(bad), measured)
    return RuleResult("train_finite", PASS, "every loss, metric and weight is finite", measured)


def divergence_rule(step_losses: Sequence[float]) -> RuleResult:
    """``not_diverged``: median loss of the last window vs the first (module docstring)."""
    n = len(step_losses)
    window = max(MIN_WINDOW, math.ceil(n * WINDOW_FRACTION))
    measured: dict[str, Any] = {"steps": n, "window": window, "max_ratio": DIVERGENCE_RATIO,
                                "min_rise": DIVERGENCE_MIN_RISE}
    if n < 2 * MIN_WINDOW:
        return RuleResult("not_diverged", NOT_JUDGED, f"{n} steps: fewer than {2 * MIN_WINDOW}", measured)
    if not all(math.isfinite(v) for v in step_losses):
        return RuleResult("not_diverged", NOT_JUDGED, "non-finite losses (see train_finite)", measured)
    start, end = median(step_losses[:window]), median(step_losses[-window:])
    ratio = end / start if start > 0 else math.inf
    measured.update(loss_start=start, loss_end=end, ratio=ratio)
    text = (f"median step loss {_g(end)} over the last {window} of {n} steps vs {_g(start)} over the first "
            f"{window} ({_g(ratio)}x, {end - start:+.3g}; fails above {DIVERGENCE_RATIO}x and "
            f"+{DIVERGENCE_MIN_RISE})")
    if end > DIVERGENCE_RATIO * start and end - start > DIVERGENCE_MIN_RISE:
        return RuleResult("not_diverged", FAIL, "training loss rose: " + text, measured)
    return RuleResult("not_diverged", PASS, text, measured)


def chance_rule(test_accuracy: float, n_classes: int, steps: int) -> RuleResult:
    """``above_chance``: final test accuracy above ``1 / n_classes`` after enough steps."""
    chance = 1.0 / n_classes if n_classes >= 2 else math.nan
    measured = {"test_accuracy": test_accuracy, "chance": chance, "n_classes": n_classes, "steps": steps,
                "min_steps": CHANCE_MIN_STEPS}
    if n_classes < 2:
        return RuleResult("above_chance", NOT_JUDGED, f"{n_classes} class(es): no chance level", measured)
    if steps < CHANCE_MIN_STEPS:
        return RuleResult("above_chance", NOT_JUDGED, f"{steps} steps: fewer than {CHANCE_MIN_STEPS}", measured)
    if not math.isfinite(test_accuracy):
        return RuleResult("above_chance", NOT_JUDGED, "test accuracy not finite (see train_finite)", measured)
    text = f"test accuracy {_g(test_accuracy)} vs chance 1/{n_classes} = {_g(chance)} after {steps} steps"
    if test_accuracy <= chance:
        return RuleResult("above_chance", FAIL, "at or below chance: " + text, measured)
    return RuleResult("above_chance", PASS, text, measured)


def sanity_checks(step_losses: Sequence[float], curves: Mapping[str, Sequence[Any]],
                  metrics: Mapping[str, float], weights_finite: bool,
                  n_classes: int) -> tuple[list[Metric], dict[str, Any]]:
    """The ``sanity:<rule>`` fail rows and ``extra["sanity"]`` (every rule: verdict, detail, measured)."""
    acc = list(curves.get("test_accuracy") or [math.nan])
    results = [finite_rule(step_losses, curves, metrics, weights_finite), divergence_rule(step_losses),
               chance_rule(float(acc[-1]), n_classes, len(step_losses))]
    rows = [Metric(PREFIX + r.name, FAIL, "", "verdict", detail=r.detail) for r in results if r.verdict == FAIL]
    return rows, {r.name: r.to_dict() for r in results}
