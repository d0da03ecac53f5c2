"""A toy level-1 runtime in one file (tests/test_toy_engines.py): the network run as a pure
function of its weights (``torch.func.functional_call``) behind the runtime contract
(d5pipe.levels.level1.runtimes.contract.Engine), the way a built-in's engine is written."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from d5pipe.levels.level1.runtimes.contract import Prepared


class ToyRuntime:
    name = "toy"

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        torch.set_num_threads(threads)
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(model, weights, (x,))

        return Prepared(run=run, told={"how": "torch.func.functional_call", "threads": threads},
                        threads=torch.get_num_threads())


def make() -> ToyRuntime:
    return ToyRuntime()
