"""Stopping a training run before its last evaluation: ``train.early_stop`` at level 2, judged
after each epoch's evaluation on the test split, the same way in PyTorch's loop
(d5pipe.levels.level2.point) and a framework's (framework_point); ``distributed.early_stop`` at
level 3, judged after each timed step on the mean loss of the worker ranks
(d5pipe.levels.level3.early_stop). One :class:`EarlyStop` decides for both; its :class:`Wording`
names what a level evaluates and counts (epochs or steps):

* ``target``: once the watched value reaches its target (level 2: the test accuracy reaches
  ``train.target_accuracy``, the epoch that ``time_to_target_s`` ends at: its meaning is unchanged;
  level 3: the mean worker loss falls to ``distributed.target_loss``);
* ``plateau``: once the loss has not improved by more than ``early_stop_min_delta`` for
  ``early_stop_patience`` evaluations in a row;
* ``either``: whichever comes first; ``off`` (the default): every evaluation runs.

The point records why it stopped (``extra.stopped``) and how many ran (``epochs_run``, ``steps_run``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from d5pipe.core.errors import D5PipeError

MODES = ("off", "target", "plateau", "either")


@dataclass(frozen=True)
class Wording:
    """What a level evaluates early stopping on, and what its record calls things."""

    unit: str
    """One evaluation: ``epoch`` (level 2) or ``step`` (level 3); the record counts ``<unit>s_run``."""
    limit_key: str
    """The setting that bounds the run (``train.epochs``)."""
    target_key: str
    """The setting of the target (``train.target_accuracy``)."""
    target_what: str
    """The value held against the target (``test accuracy``)."""
    loss_what: str
    """The loss a plateau is judged on (``test loss``)."""
    higher_is_better: bool
    """Whether the target is reached from below (an accuracy) or from above (a loss)."""


EPOCHS = Wording("epoch", "train.epochs", "train.target_accuracy", "test accuracy", "test loss", True)
"""Level 2's: after each epoch, the test accuracy against its target and the test loss."""


@dataclass
class EarlyStop:
    mode: str = "off"
    target: float | None = None
    patience: int = 3
    min_delta: float = 0.0
    best_loss: float = math.inf
    best_epoch: int = 0
    """The evaluation (epoch or step) of :attr:`best_loss`."""
    reason: str = ""
    words: Wording = field(default=EPOCHS)

    @classmethod
    def of(cls, conf: Any) -> EarlyStop:
        """From a resolved :class:`~d5pipe.levels.level2.schema.TrainConf`."""
        return cls(conf.early_stop, conf.target_accuracy, conf.early_stop_patience, conf.early_stop_min_delta)

    def after(self, n: int, loss: float, value: float) -> bool:
        """Whether to stop after evaluation ``n`` (from 1) with ``loss`` and the target's ``value``
        (its reason in :attr:`reason`)."""
        w = self.words
        if self.mode in ("target", "either") and self.target is not None and (
                value >= self.target if w.higher_is_better else value <= self.target):
            self.reason = f"target: {w.target_what} {value:.4f} reached {w.target_key}={self.target} after {w.unit} {n}"
            return True
        if self.mode in ("plateau", "either"):
            if loss < self.best_loss - self.min_delta:
                self.best_loss, self.best_epoch = loss, n
            elif n - self.best_epoch >= self.patience:
                self.reason = (f"plateau: the {w.loss_what} did not improve by more than {self.min_delta:g} for "
                               f"{self.patience} {w.unit}(s) (best {self.best_loss:.4g} after {w.unit} "
                               f"{self.best_epoch})")
                return True
        return False

    def after_epoch(self, epoch: int, test_loss: float, test_accuracy: float) -> bool:
        """Level 2: whether to stop after ``epoch``, from its test loss and accuracy."""
        return self.after(epoch, test_loss, test_accuracy)

    def record(self, run: int, limit: int) -> dict[str, Any]:
        """What the point's record says: why training stopped and after how many evaluations
        (level 2: ``epochs_run`` of ``epochs``; level 3: ``steps_run`` of ``steps``)."""
        unit = self.words.unit
        counts = {f"{unit}s_run": run, f"{unit}s": limit}
        if self.reason:
            return {"by": "early_stop", "reason": self.reason, **counts}
        return {"by": f"{unit}s", "reason": f"all {limit} {unit}(s) of {self.words.limit_key} ran", **counts}


def check_early_stop(conf: dict[str, Any], section: str = "train", target_key: str = "target_accuracy",
                     target_default: float | None = 0.9) -> None:
    """``target`` and ``either`` need a target (level 2: ``train.target_accuracy``)."""
    mode = conf.get("early_stop", "off")
    if mode in ("target", "either") and conf.get(target_key, target_default) is None:
        raise D5PipeError(f"{section}.early_stop: {mode!r} stops at {section}.{target_key}, which is null")
