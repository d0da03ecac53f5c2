"""OpenVINO as a level-1 runtime (``level1.runtime: openvino``): the CPU, ``INFERENCE_NUM_THREADS``
pinned to the point's, precision hint f32, so that it computes in the point's dtype and not in a
lower one. It reads the network's ONNX export (d5pipe.levels.level1.runtimes.onnx_export) or a
user's ONNX file; it runs inference only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.levels.declare import package_versions
from d5pipe.levels.level1.runtimes.contract import Prepared, Runtime, require

if TYPE_CHECKING:
    import torch
    from torch import nn


class OpenVino:
    name = "openvino"

    def versions(self) -> dict[str, str]:
        return package_versions("openvino")

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        from d5pipe.levels.level1.runtimes.onnx_export import export_onnx

        return self.prepare_file(export_onnx(model, example, onnx_dir), threads)

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        import openvino as ov
        import torch

        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
                  "PERFORMANCE_HINT": "LATENCY"}
        compiled = ov.Core().compile_model(onnx["path"], "CPU", config)
        output = compiled.output(0)
        request = compiled.create_infer_request()

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(request.infer([x.detach().cpu().numpy()])[output].copy())

        used = int(compiled.get_property("INFERENCE_NUM_THREADS"))
        told = {"device": "CPU", **config, "precision_used": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}
        return Prepared(run=run, told=told, threads=used, onnx=onnx)


def make() -> OpenVino:
    """``level1.runtime: openvino``."""
    require(RUNTIME)
    return OpenVino()


RUNTIME = Runtime("openvino", f"{__name__}.make", packages=("openvino", "onnxscript"), reads_onnx=True)
"""onnxscript is what torch.onnx.export uses."""
