"""ONNX Runtime as a level-1 runtime (``level1.runtime: onnxruntime``): the CPU execution provider,
all graph optimisations, intra-op threads pinned to the point's, one inter-op thread. It reads the
network's ONNX export (d5pipe.levels.level1.runtimes.onnx_export) or a user's ONNX file; it runs
inference only (forward+backward is PyTorch's, and those metrics are left out with the reason)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.levels.declare import package_versions
from d5pipe.levels.level1.runtimes.contract import Prepared, Runtime, require

if TYPE_CHECKING:
    import torch
    from torch import nn


class OnnxRuntime:
    name = "onnxruntime"

    def versions(self) -> dict[str, str]:
        return package_versions("onnxruntime")

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        from d5pipe.levels.level1.runtimes.onnx_export import export_onnx

        return self.prepare_file(export_onnx(model, example, onnx_dir), threads)

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(onnx["path"], options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(session.run(None, {name: x.detach().cpu().numpy()})[0])

        told = {"providers": session.get_providers(), "intra_op_num_threads": threads,
                "inter_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL"}
        return Prepared(run=run, told=told, threads=int(options.intra_op_num_threads), onnx=onnx)


def make() -> OnnxRuntime:
    """``level1.runtime: onnxruntime``."""
    require(RUNTIME)
    return OnnxRuntime()


RUNTIME = Runtime("onnxruntime", f"{__name__}.make", packages=("onnxruntime", "onnxscript"), reads_onnx=True)
"""onnxscript is what torch.onnx.export uses."""
