"""A toy level-2 training framework in one file (tests/test_toy_engines.py): it builds the traced
network itself from its framework-neutral layers (d5pipe.levels.level2.frameworks.graph), one
torch function per layer kind, and steps with the optimizer it is told -- the way a built-in's
engine (d5pipe.levels.level2.frameworks.contract.TrainingFramework) is written."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
from d5pipe.levels.level2.frameworks.graph import Graph, Layer, check_ops, interpret
from d5pipe.levels.level2.frameworks.torch_framework import torch_optimizer

OPS = {
    "linear": lambda layer, p, x: x @ p["weight"].T + p["bias"] if "bias" in p else x @ p["weight"].T,
    "relu": lambda layer, p, x: torch.relu(x),
    "flatten": lambda layer, p, x: torch.flatten(x, layer.attrs["start"], layer.attrs["end"]),
    "identity": lambda layer, p, x: x,
}


class ToyFramework:
    name = "toy"

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = getattr(torch, dtype)

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def prepare(self, graph: Graph, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        check_ops(graph, OPS, "toy")
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        self.graph = graph
        self.params = {n: torch.tensor(weights[n], dtype=self.dtype, requires_grad=True) for n in graph.shapes}
        self.optimizer = torch_optimizer(list(self.params.values()), optimizer)
        self.compile_s = time.perf_counter() - t0  # nothing to compile: building the weights
        return {"threads": threads, "dtype": str(self.dtype), "layers": graph.kinds()}

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        def keep(layer: Layer, stats: Any) -> None:
            raise AssertionError("no batch norm in a toy network")

        self.optimizer.zero_grad(set_to_none=True)
        logits = interpret(self.graph, OPS, self.params, torch.from_numpy(x).to(self.dtype), keep)
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y).long())
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def weights(self) -> dict[str, np.ndarray]:
        return {n: p.detach().double().numpy().copy() for n, p in self.params.items()}
