"""User level-1 runtimes for tests/test_runtimes.py: one honest (PyTorch eager, through the runtime
interface) and one that perturbs every output by 1%, which output_check must fail."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from d5pipe.levels.level1.runtimes.contract import Prepared


class Honest:
    name = "honest_eager"

    def versions(self) -> dict[str, str]:
        return {"honest": "1.0"}

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        torch.set_num_threads(threads)
        return Prepared(run=model, told={"threads": threads}, threads=torch.get_num_threads())


class Perturbed(Honest):
    name = "perturbed"

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        inner = super().prepare(model, example, threads, onnx_dir)
        return Prepared(run=lambda x: inner.run(x) * 1.01, told=inner.told, threads=inner.threads)


def honest() -> Honest:
    return Honest()


def perturbed() -> Perturbed:
    return Perturbed()
