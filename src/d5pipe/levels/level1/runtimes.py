"""Level 1 runtimes: what executes a point's network (``level1.runtime``), behind one small interface.

A runtime is a factory (a built-in below, or a user target in ``level1.custom_runtimes`` under
the allow-list of the person running d5pipe) returning an object with

* ``name`` and ``version()`` -- recorded with the point (``extra.runtime``);
* ``prepare(model, example, threads, onnx_dir) -> Prepared``: take the network (eval mode, its
  weights already in the point's dtype), an example batch and the point's intra-op thread count;
  ``onnx_dir`` is where the exported ONNX file of the network lives (:func:`export_onnx`).

``Prepared.run(x)`` returns the outputs of one batch as a tensor; ``Prepared.settings`` says what
the runtime was told (thread counts, precision, graph optimisation) and ``Prepared.threads`` how
many intra-op threads it reports using (None: it cannot say -- flagged in the record).

Built-ins: ``torch`` (PyTorch itself; ``level1.impl`` chooses eager or ``torch.compile``),
``onnxruntime`` (CPU execution provider, all graph optimisations, intra-op threads pinned, one
inter-op thread) and ``openvino`` (CPU, ``INFERENCE_NUM_THREADS`` pinned, precision hint f32,
so it computes in the point's dtype and not in a lower one). Both read the network from one ONNX
export per network weights, dtype and input shape (:func:`export_onnx`), kept in the run directory
(``onnx/<sha256>.onnx``) with its hash in the record, so the bundle carries it.

Only inference runs on the ONNX runtimes: forward+backward is PyTorch's, and those metrics are
left out with the reason.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from d5pipe.core.atomic import file_sha256, replacing
from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.level1.stage import RUNTIME_PACKAGES


@dataclass
class Prepared:
    """A network ready to run on a runtime (see module docstring)."""

    run: Callable[[torch.Tensor], torch.Tensor]
    settings: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    onnx: dict[str, str] = field(default_factory=dict)
    """``{"path", "sha256"}`` of the ONNX file the runtime read (empty for PyTorch)."""


class Runtime(Protocol):
    name: str

    def version(self) -> str: ...

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared: ...


def network_key(model: nn.Module, example: torch.Tensor) -> str:
    """sha256 of the network's weights, class, input shape and dtype: one export per key."""
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


class _Named:
    """A built-in runtime: its ``version()`` is that of the Python package ``name`` names."""

    name = ""

    def version(self) -> str:
        return str(importlib.import_module(self.name).__version__)


class TorchRuntime(_Named):
    """PyTorch itself: the point's model as it is (``level1.impl`` applies)."""

    name = "torch"
    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        return Prepared(run=model, settings={"intra_op_threads": torch.get_num_threads()},
                        threads=torch.get_num_threads())


class OnnxRuntime(_Named):
    """ONNX Runtime, CPU execution provider."""

    name = "onnxruntime"

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        return self.prepare_file(export_onnx(model, example, onnx_dir), threads)

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        """An ONNX file (``{"path", "sha256"}``): a user's own, or this module's export."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(onnx["path"], options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(session.run(None, {name: x.detach().cpu().numpy()})[0])

        settings = {"providers": session.get_providers(), "intra_op_num_threads": threads,
                    "inter_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL"}
        return Prepared(run=run, settings=settings, threads=int(options.intra_op_num_threads), onnx=onnx)


class OpenVino(_Named):
    """OpenVINO on the CPU, told to compute in float32 with the point's threads."""

    name = "openvino"

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared:
        return self.prepare_file(export_onnx(model, example, onnx_dir), threads)

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        """An ONNX file (``{"path", "sha256"}``): a user's own, or this module's export."""
        import openvino as ov

        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
                  "PERFORMANCE_HINT": "LATENCY"}
        compiled = ov.Core().compile_model(onnx["path"], "CPU", config)
        output = compiled.output(0)
        request = compiled.create_infer_request()

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(request.infer([x.detach().cpu().numpy()])[output].copy())

        used = int(compiled.get_property("INFERENCE_NUM_THREADS"))
        settings = {"device": "CPU", **config, "precision_used": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}
        return Prepared(run=run, settings=settings, threads=used, onnx=onnx)


def _needs(runtime: str) -> None:
    """The point is skipped without the package the runtime imports or onnxscript (the export's)."""
    for module in (RUNTIME_PACKAGES[runtime], "onnxscript"):
        if importlib.util.find_spec(module) is None:
            raise PointSkipped(f"level1.runtime={runtime}: the Python package {module!r} is not installed "
                               "(pip install 'd5pipe[frameworks]'; make install does)")


def torch_runtime() -> Runtime:
    """``level1.runtime: torch``."""
    return TorchRuntime()


def onnxruntime_runtime() -> Runtime:
    """``level1.runtime: onnxruntime``."""
    _needs("onnxruntime")
    return OnnxRuntime()


def openvino_runtime() -> Runtime:
    """``level1.runtime: openvino``."""
    _needs("openvino")
    return OpenVino()
