"""Schema of the ``train`` section (level 2; level 3 reads it too). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from d5pipe.config.fields import at_least, between, choice, positive

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw")
SCHEDULES: tuple[str, ...] = ("constant", "cosine", "step")


@dataclass
class TrainConf:
    optimizer: str = choice("adam", OPTIMIZERS)
    """``sgd`` (with ``momentum``), ``adam`` or ``adamw``."""
    lr: float = positive(1e-3)
    momentum: float = at_least(0.9, 0.0)
    weight_decay: float = at_least(0.0, 0.0)
    schedule: str = choice("constant", SCHEDULES)
    """``constant``, ``cosine`` (to 0 over all epochs) or ``step`` (x ``gamma`` every ``step_epochs``)."""
    step_epochs: int = at_least(0, 0)
    """``step`` schedule period in epochs; 0 means max(1, epochs // 3)."""
    gamma: float = positive(0.1)
    batch_size: int = at_least(32, 1)
    eval_batch_size: int = at_least(512, 1)
    epochs: int = at_least(5, 1)
    deterministic: bool = True
    target_accuracy: Optional[float] = between(0.9, 0.0, 1.0, closed_high=True)  # noqa: UP045
    """Test accuracy whose first crossing gives ``time_to_target_s``; null disables it."""
    num_workers: int = at_least(0, 0)
    device: str = "cpu"
    log_every: int = at_least(1, 1)
    """Write every n-th step to ``steps.jsonl``."""
