"""A user's training framework with an optimizer 1% off: its learning rate is the point's x 1.01
(what a framework whose optimizer convention differs slightly would do). d5pipe's step-by-step
check must fail it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
from d5pipe.levels.level2.frameworks.torch_framework import TorchFramework


class OffByOnePercent(TorchFramework):
    def prepare(self, graph: Any, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        told = super().prepare(graph, weights, dataclasses.replace(optimizer, lr=optimizer.lr * 1.01), example, threads)
        self.name = "off_by_one_percent"
        return told
