"""Every framework of a point against PyTorch in float64, from the same weights and batches.

:func:`run_steps` prepares a framework and takes one step per batch; :func:`check` compares its
losses and its weight updates with the reference's. The update (weights after K steps minus the
initial weights) is compared, not the weights: a small learning rate hides a wrong optimizer in
the weights but not in what the optimizer changed.

The conventions (initialisation, data order, loss reduction, where the optimizer puts its decay
and epsilon) are checked with the framework in float64, where a correct framework agrees to
rounding (1e-14 measured for JAX on the CNN, 2e-11 on ResNet-50 after two steps; 1e-8 for
TensorFlow) and a 1% different learning rate shows as a 1e-2 update difference
(so does keras's Adam, whose epsilon sits inside the bias correction). In float32 Adam's steps on
near-zero gradients amplify rounding (update differences up to 5e-3 measured for a correct JAX
AdamW; 2e-2 after one SGD step of ResNet-50 at batch 4, whose losses are 5e-3 apart a step
later), so a float32 run is held to its first loss only, the initial weights' forward pass: that
catches a lowered precision, not a convention. TensorFlow keeps its optimizers' learning rate in
keras's float type, which d5pipe sets to the run's dtype (left at float32, the rounding of a float64
run's learning rate grew to 6e-4 of ResNet-50's second update).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from d5pipe.levels.declare import Compiles
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec, TrainingFramework
from d5pipe.levels.level2.frameworks.graph import Graph
from d5pipe.levels.verify import NO_DETECT, PASS, max_relative_difference, relative_divergence, tolerance, verdict


@dataclass
class Steps:
    framework: str
    told: dict[str, Any]
    versions: dict[str, str]
    compile_s: float
    losses: list[float]
    step_s: list[float]
    weights: dict[str, np.ndarray]
    extra: dict[str, Any] = field(default_factory=dict)


def prepare(framework: TrainingFramework, graph: Graph, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
            example: tuple[np.ndarray, np.ndarray], threads: int) -> tuple[dict[str, Any], float]:
    """``framework.prepare`` and its compile time: the ``compile_s`` it measured itself, else the
    whole prepare's wall time."""
    t0 = time.perf_counter()
    told = framework.prepare(graph, weights, optimizer, example, threads)
    return told, float(framework.compile_s if isinstance(framework, Compiles) else time.perf_counter() - t0)


def run_steps(framework: TrainingFramework, graph: Graph, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
              batches: Sequence[tuple[np.ndarray, np.ndarray]], threads: int) -> Steps:
    """Prepare (timed as compile) and one step per batch (each timed; the framework drains)."""
    told, compile_s = prepare(framework, graph, weights, optimizer, batches[0], threads)
    losses, times = [], []
    for x, y in batches:
        t = time.perf_counter_ns()
        losses.append(framework.step(x, y))
        times.append((time.perf_counter_ns() - t) * 1e-9)
    return Steps(framework.name, told, framework.versions(), compile_s, losses, times, framework.weights())


@dataclass(frozen=True)
class Agreement:
    loss_rel_err: float
    update_rel_l2: float
    running_stats_rel_l2: float
    """Batch norms' running statistics after the steps (0 without batch norms)."""
    tolerance: float
    updates_checked: bool

    @property
    def passed(self) -> bool:
        """Every compared difference within the tolerance (d5pipe.levels.verify.verdict, no detection limit)."""
        checked = (self.update_rel_l2, self.running_stats_rel_l2) if self.updates_checked else ()
        return verdict(max((self.loss_rel_err, *checked)), self.tolerance, NO_DETECT) == PASS

    def why(self) -> str:
        if self.passed:
            return ""
        parts = []
        if not self.loss_rel_err <= self.tolerance:
            parts.append(f"losses differ by {self.loss_rel_err:.3g} (relative)")
        if self.updates_checked and not self.update_rel_l2 <= self.tolerance:
            parts.append(f"weight updates differ by {self.update_rel_l2:.3g} (relative L2)")
        if self.updates_checked and not self.running_stats_rel_l2 <= self.tolerance:
            parts.append(f"running statistics differ by {self.running_stats_rel_l2:.3g} (relative L2)")
        return "; ".join(parts) + f" from PyTorch float64, tolerance {self.tolerance:g}"


def _rel_l2(got: Steps, ref: Steps, initial: dict[str, np.ndarray], names: Sequence[str]) -> float:
    """d5pipe.levels.verify.relative_divergence of the weights ``names``, as one vector, from ``initial``."""
    if not names:
        return 0.0
    return relative_divergence(*(np.concatenate([w[n].ravel() for n in names]) for w in (got.weights, ref.weights, initial)))


def check(steps: Steps, reference: Steps, initial: dict[str, np.ndarray], graph: Graph,
          dtype: str = "float32") -> Agreement:
    """The largest relative loss difference over the steps (float32: the first step's), the relative
    L2 difference of the whole update (all parameters as one vector) and of the running statistics'
    change (both held to the tolerance in float64); NaN fails."""
    first = 1 if dtype == "float32" else len(reference.losses)  # see the module docstring
    return Agreement(max_relative_difference(steps.losses[:first], reference.losses[:first]), _rel_l2(steps, reference, initial, list(graph.shapes)),
                     _rel_l2(steps, reference, initial, list(graph.buffer_shapes)), tolerance("framework", dtype)[0],
                     dtype == "float64")
