"""Stopping a training run before ``train.epochs`` (``train.early_stop``), judged after each
epoch's evaluation on the test split, the same way in PyTorch's loop (d5pipe.levels.level2.point)
and a framework's (framework_point):

* ``target``: once the test accuracy reaches ``train.target_accuracy`` (the epoch that
  ``time_to_target_s`` ends at: its meaning is unchanged);
* ``plateau``: once the test loss has not improved by more than ``train.early_stop_min_delta``
  for ``train.early_stop_patience`` epochs in a row;
* ``either``: whichever comes first; ``off`` (the default): every epoch runs.

The point records why it stopped (``extra.stopped``) and the epochs it ran (``epochs_run``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from d5pipe.core.errors import D5PipeError

MODES = ("off", "target", "plateau", "either")


@dataclass
class EarlyStop:
    mode: str = "off"
    target: float | None = None
    patience: int = 3
    min_delta: float = 0.0
    best_loss: float = math.inf
    best_epoch: int = 0
    reason: str = ""

    @classmethod
    def of(cls, conf: Any) -> EarlyStop:
        """From a resolved :class:`~d5pipe.levels.level2.schema.TrainConf`."""
        return cls(conf.early_stop, conf.target_accuracy, conf.early_stop_patience, conf.early_stop_min_delta)

    def after_epoch(self, epoch: int, test_loss: float, test_accuracy: float) -> bool:
        """Whether to stop after ``epoch`` (its reason in :attr:`reason`)."""
        if self.mode in ("target", "either") and self.target is not None and test_accuracy >= self.target:
            self.reason = (f"target: test accuracy {test_accuracy:.4f} reached train.target_accuracy={self.target} "
                           f"after epoch {epoch}")
            return True
        if self.mode in ("plateau", "either"):
            if test_loss < self.best_loss - self.min_delta:
                self.best_loss, self.best_epoch = test_loss, epoch
            elif epoch - self.best_epoch >= self.patience:
                self.reason = (f"plateau: the test loss did not improve by more than {self.min_delta:g} for "
                               f"{self.patience} epoch(s) (best {self.best_loss:.4g} after epoch {self.best_epoch})")
                return True
        return False

    def record(self, epochs_run: int, epochs: int) -> dict[str, Any]:
        """What the point's record says: why training stopped and after how many epochs."""
        if self.reason:
            return {"by": "early_stop", "reason": self.reason, "epochs_run": epochs_run, "epochs": epochs}
        return {"by": "epochs", "reason": f"all {epochs} epoch(s) of train.epochs ran", "epochs_run": epochs_run,
                "epochs": epochs}


def check_early_stop(train: dict[str, Any]) -> None:
    """``target`` and ``either`` need ``train.target_accuracy``."""
    mode = train.get("early_stop", "off")
    if mode in ("target", "either") and train.get("target_accuracy", 0.9) is None:
        raise D5PipeError(f"train.early_stop: {mode!r} stops at train.target_accuracy, which is null")
