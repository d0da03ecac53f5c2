"""ONNX Runtime and OpenVINO as level-1 runtimes. Both read one ONNX export of the network per
weights, dtype and input shape (:func:`export_onnx`), kept in the run directory
(``onnx/<sha256>.onnx``) with its hash in the record so that the bundle carries it, or a user's
ONNX file (``level1.onnx_file``); both run inference only (forward+backward is PyTorch's, and
those metrics are left out with the reason). Torch and the runtimes are imported when a point runs.

* ``onnxruntime``: the CPU execution provider, all graph optimisations, intra-op threads pinned to
  the point's, one inter-op thread;
* ``openvino``: the CPU, ``INFERENCE_NUM_THREADS`` pinned, precision hint f32, so that it computes
  in the point's dtype and not in a lower one.

Each has its own profiler for the profiled pass (``profile.enabled``): ONNX Runtime's session
profiling (kernel time per node, a Chrome trace) and OpenVINO's per-layer performance counters.
"""

from __future__ import annotations

import functools
import hashlib
import io
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.atomic import file_sha256, replacing
from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.level1.runtimes.contract import Engine, Prepared, Runtime, require
from d5pipe.levels.ort_profile import ort_profile
from d5pipe.measure.profile import pass_record

if TYPE_CHECKING:
    import torch
    from torch import nn


class _FromOnnx(Engine):
    """A runtime that runs the network's ONNX export (its own :meth:`prepare_file` reads a file)."""

    name = ""

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        return self.prepare_file(export_onnx(model, example, onnx_dir), threads)

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        raise NotImplementedError


class OnnxRuntime(_FromOnnx):
    name = "onnxruntime"

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

        def profile(x: torch.Tensor, iterations: int, trace: Path | None) -> dict[str, Any]:
            return ort_profile(onnx["path"], options, {name: x.detach().cpu().numpy()}, iterations, trace, "inference")

        return Prepared(run=run, told=told, threads=int(options.intra_op_num_threads), onnx=onnx, profile=profile)


class OpenVino(_FromOnnx):
    name = "openvino"

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
        return Prepared(run=run, told=told, threads=used, onnx=onnx,
                        profile=functools.partial(_openvino_profile, onnx["path"], config))


def _openvino_profile(path: str, config: dict[str, Any], x: torch.Tensor, iterations: int,
                      trace: Path | None) -> dict[str, Any]:
    """OpenVINO's per-layer performance counters (``PERF_COUNT``) on a model compiled like the timed
    one: each executed layer's real time per layer type and kernel (``ov::<type> (<kernel>)``),
    summed over the profiled inferences (the warm one left out). OpenVINO writes no trace file."""
    import openvino as ov

    started = time.perf_counter()
    request = ov.Core().compile_model(path, "CPU", {**config, "PERF_COUNT": True}).create_infer_request()
    batch = [x.detach().cpu().numpy()]
    request.infer(batch)
    ops: dict[str, dict[str, Any]] = {}
    wall = 0.0
    for _ in range(iterations):
        t0 = time.perf_counter()
        request.infer(batch)
        wall += time.perf_counter() - t0
        for info in request.get_profiling_info():
            seconds = info.real_time.total_seconds()
            if seconds > 0:
                row = ops.setdefault(f"ov::{info.node_type} ({info.exec_type})", {"calls": 0, "self_s": 0.0})
                row["calls"] += 1
                row["self_s"] += seconds
    out = pass_record("inference", "openvino PERF_COUNT", {"openvino": ov.__version__}, iterations, wall,
                      [{"operator": k, **v, "total_s": v["self_s"], "input_shapes": ""} for k, v in ops.items()])
    out["pass_s"] = time.perf_counter() - started
    return out


def make_onnxruntime() -> OnnxRuntime:
    """``level1.runtime: onnxruntime``."""
    require(ONNXRUNTIME)
    return OnnxRuntime()


def make_openvino() -> OpenVino:
    """``level1.runtime: openvino``."""
    require(OPENVINO)
    return OpenVino()


ONNXRUNTIME = Runtime("onnxruntime", f"{__name__}.make_onnxruntime", packages=("onnxruntime", "onnxscript"),
                      reads_onnx=True)
OPENVINO = Runtime("openvino", f"{__name__}.make_openvino", packages=("openvino", "onnxscript"), reads_onnx=True)
"""onnxscript is what torch.onnx.export uses."""


def network_key(model: nn.Module, example: torch.Tensor) -> str:
    """sha256 of the network's weights, class, input shape and dtype: one export per key."""
    import torch

    h = hashlib.sha256()
    h.update(type(model).__qualname__.encode())
    h.update(repr((tuple(example.shape), str(example.dtype))).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        buf = io.BytesIO()
        torch.save(tensor.detach().cpu().contiguous(), buf)
        h.update(buf.getvalue())
    return h.hexdigest()[:32]


def export_onnx(model: nn.Module, example: torch.Tensor, onnx_dir: Path) -> dict[str, str]:
    """The network as ONNX in ``onnx_dir`` (exported once per :func:`network_key`); path and sha256."""
    import torch

    computed = example.dtype if example.is_floating_point() else next(
        (p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    if computed != torch.float32:
        raise PointSkipped(f"ONNX runtimes: level1.dtype {str(computed).removeprefix('torch.')} is not "
                           "supported yet (float32 only)")

    def export(tmp: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), (example,), tmp, input_names=["x"], output_names=["y"],
                              dynamo=True, external_data=False, verbose=False)

    path = write_once(onnx_dir / f"{network_key(model, example)}.onnx", export)
    return {"path": str(path), "sha256": file_sha256(path)}


def write_once(path: Path, write: Callable[[str], object]) -> Path:
    """``path``; unless it exists, made by ``write(tmp)`` into a temporary file beside it and
    renamed (d5pipe.core.atomic.replacing), so that no reader sees half a file."""
    if not path.exists():
        with replacing(path, durable=False) as tmp:
            write(str(tmp))
    return path
