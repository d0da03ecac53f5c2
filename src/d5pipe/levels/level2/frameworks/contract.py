"""What a training framework is told and what it must do (torch-free).

A framework builds the network of a :class:`~.graph.Graph` from given initial weights, compiles
or traces its training step for one example batch (timed on its own, never as a step), then takes
optimizer steps on batches it is handed (numpy arrays) and returns each step's loss, its device
drained. Weights are the parameters and the running statistics of batch norms (the graph's
``shapes`` and ``buffer_shapes``) under torch's names; ``weights()`` returns them as float64 numpy
arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.declare import Engine
from d5pipe.levels.level2.schema import OPTIMIZERS


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer with torch's conventions: ``sgd`` adds ``weight_decay * w`` to the gradient
    and keeps a momentum buffer ``b = momentum * b + g`` (no dampening, not Nesterov); ``adam``
    adds the decay to the gradient and divides by ``sqrt(v_hat) + eps``; ``adamw`` decays the
    weights by ``lr * weight_decay`` apart from the gradient. Each framework maps these onto its
    native optimizer and says how (``told``)."""

    name: str
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise D5PipeError(f"train.optimizer: {self.name!r} has no cross-framework mapping "
                              f"(one of {', '.join(OPTIMIZERS)})")


class UnsupportedNetwork(D5PipeError):
    """A layer or operation that a framework's builder does not translate (the point is skipped)."""


class TrainingFramework(Engine, Protocol):
    """A built-in or user framework (a target under the runner's allow-list): an engine
    (d5pipe.levels.declare.Engine; one that times its own compile is also a
    d5pipe.levels.declare.Compiles)."""

    def prepare(self, graph: Any, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        """Build the network from ``weights`` (float32), set up ``optimizer``, compile or trace the
        step for batches shaped like ``example`` without changing the weights; return what the
        framework was told (threads, precision, optimizer mapping, compiler settings)."""
        ...

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One optimizer step on the batch; the mean cross-entropy before the update."""
        ...

    def weights(self) -> dict[str, np.ndarray]:
        """The current parameters and running statistics by name (float64 copies)."""
        ...
