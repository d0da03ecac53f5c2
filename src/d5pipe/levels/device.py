"""Small torch runtime helpers shared by levels 1 and 2: devices, dtypes, synchronisation, checksums."""

from __future__ import annotations

import hashlib

import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.schema import DTYPES as DTYPE_NAMES

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


def require_device(device: str, key: str) -> torch.device:
    """``torch.device(device)``; skip the point when that device is not present here."""
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise D5PipeError(f"{key}: invalid device {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PointSkipped(f"{key}={device}: CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise D5PipeError(f"{key}: unsupported device {device!r} (use cpu or cuda[:N])")
    return dev


def torch_dtype(name: str, key: str) -> torch.dtype:
    """The torch dtype for a config name."""
    try:
        return DTYPES[name]
    except KeyError:
        raise D5PipeError(f"{key}: unknown dtype {name!r}; known: {sorted(DTYPES)}") from None


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 over the state dict: each entry's name, dtype, shape and raw bytes, in key order."""
    h = hashlib.sha256()
    state = module.state_dict()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
