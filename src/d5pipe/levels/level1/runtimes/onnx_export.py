"""The network of a level-1 point as ONNX, exported once per network weights, dtype and input shape
(:func:`export_onnx`) and kept in the run directory (``onnx/<sha256>.onnx``) with its hash in the
record, so the bundle carries it. The ONNX runtimes read it (d5pipe.levels.level1.runtimes)."""

from __future__ import annotations

import hashlib
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from d5pipe.core.atomic import file_sha256, replacing
from d5pipe.levels.contract import PointSkipped


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
