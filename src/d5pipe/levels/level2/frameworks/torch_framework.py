"""PyTorch as a training framework: ``torch`` (eager) and ``compile`` (``torch.compile``), declared
here (the reference, in float64, is the eager one). The network is the point's own module, its
weights replaced by the given ones. Torch is imported when a framework is built, not with the
declarations (``d5pipe plan`` reads them torch-free)."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from d5pipe.levels.declare import Builtin, package_versions
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec

if TYPE_CHECKING:
    import torch
    from torch import nn


def torch_optimizer(params: Any, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """The spec as ``torch.optim`` (its conventions are the spec's)."""
    import torch

    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    klass = torch.optim.Adam if spec.name == "adam" else torch.optim.AdamW
    return klass(params, lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)


class TorchFramework:
    """``compile``: the model wrapped in ``torch.compile`` (inductor), compiled in :meth:`prepare`
    by one forward and backward on the example batch whose gradients and buffer updates are
    discarded (``compile_s``; eager compiles nothing: 0); ``dtype``: float32, or float64 for the
    reference."""

    def __init__(self, model: nn.Module, compile: bool = False, dtype: str = "float32") -> None:
        import torch

        self.name = "compile" if compile else "torch"
        self._source = model
        self._compile = compile
        self.dtype = dtype
        self._dtype = getattr(torch, dtype)

    def versions(self) -> dict[str, str]:
        return package_versions("torch")

    def prepare(self, graph: Any, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        import torch
        from torch import nn

        from d5pipe.levels.level2.frameworks.trace import load_weights, model_tensors

        torch.set_num_threads(threads)
        self.model = copy.deepcopy(self._source).to(self._dtype).train()
        self._tensors_by_name = model_tensors(self.model, graph)
        load_weights(self._tensors_by_name, weights)
        self.optimizer = torch_optimizer(self.model.parameters(), optimizer)
        self.forward: Any = self.model
        self.compile_s = 0.0
        told: dict[str, Any] = {"threads": torch.get_num_threads(), "dtype": str(self._dtype).removeprefix("torch."),
                                "optimizer": f"torch.optim.{type(self.optimizer).__name__}",
                                "optimizer_defaults": {k: v for k, v in self.optimizer.defaults.items()
                                                       if isinstance(v, (int, float, bool, tuple, type(None)))}}
        if self._compile:
            self.forward = torch.compile(self.model)
            buffers = {k: v.clone() for k, v in self.model.named_buffers()}
            t0 = time.perf_counter()
            x, y = self.tensors(*example)
            nn.functional.cross_entropy(self.forward(x), y).backward()
            self.compile_s = time.perf_counter() - t0
            self.model.zero_grad(set_to_none=True)
            with torch.no_grad():
                for k, v in self.model.named_buffers():
                    v.copy_(buffers[k])
            told["compiler"] = "torch.compile(backend=inductor, mode=default)"
        return told

    def tensors(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        return torch.from_numpy(x).to(self._dtype), torch.from_numpy(y).long()

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        from torch import nn

        xt, yt = self.tensors(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.forward(xt), yt)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def weights(self) -> dict[str, np.ndarray]:
        from d5pipe.levels.level2.frameworks.trace import as_float64

        return as_float64(self._tensors_by_name)


TORCH = Builtin("torch", f"{__name__}.TorchFramework")
COMPILE = Builtin("compile", f"{__name__}.TorchFramework", fixed={"compile": True})
