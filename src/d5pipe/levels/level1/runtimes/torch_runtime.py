"""PyTorch itself as a level-1 runtime: ``torch`` (``level1.impl`` eager or compile) and ``compile``
(the same as ``torch`` with ``impl: compile``). A point on either runs the model itself
(d5pipe.levels.level1.point); the engine here is that network behind the runtime interface."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.levels.level1.runtimes.contract import Engine, Prepared, Runtime

if TYPE_CHECKING:
    import torch
    from torch import nn


class TorchRuntime(Engine):
    name = "torch"

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        import torch

        return Prepared(run=model, told={"intra_op_threads": torch.get_num_threads()}, threads=torch.get_num_threads())


def make() -> TorchRuntime:
    """``level1.runtime: torch`` (or ``compile``)."""
    return TorchRuntime()


RUNTIME = Runtime("torch", f"{__name__}.make", on_torch=True, impls=("eager", "compile"))
COMPILE = Runtime("compile", f"{__name__}.make", on_torch=True, compiles=True)
