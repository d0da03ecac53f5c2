"""Seeding and deterministic execution for training and benchmarking points.

* :func:`seed_everything` seeds Python's ``random``, NumPy's global RNG and torch (all devices).
* :func:`deterministic_mode` is a context manager: when enabled it calls
  ``torch.use_deterministic_algorithms(True)``, turns off cuDNN benchmarking, and on CUDA sets
  ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (required by cuBLAS for reproducible GEMMs). The previous
  state is restored on exit, so points sharing a shard process do not leak settings.
* :func:`loader_generator` / :func:`seed_worker` seed DataLoader shuffling and worker processes.

Each function returns a JSON-serialisable record of what it set, for ``PointOutcome.extra``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

NUMPY_SEED_MODULUS = 1 << 32
CUBLAS_WORKSPACE = ":4096:8"


def seed_everything(seed: int) -> dict[str, int]:
    """Seed ``random``, ``numpy.random`` and torch (CPU and every CUDA device) from one seed."""
    seed = int(seed)
    numpy_seed = seed % NUMPY_SEED_MODULUS
    random.seed(seed)
    np.random.seed(numpy_seed)
    torch.manual_seed(seed)  # also seeds all CUDA devices
    return {"python_random": seed, "numpy": numpy_seed, "torch": seed}


@contextmanager
def deterministic_mode(enabled: bool, device: str = "cpu") -> Iterator[dict[str, Any]]:
    """Run the body with deterministic algorithms on (when ``enabled``); restore state afterwards."""
    prev_algos = torch.are_deterministic_algorithms_enabled()
    prev_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_benchmark = torch.backends.cudnn.benchmark
    prev_cudnn_det = torch.backends.cudnn.deterministic
    prev_cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    record: dict[str, Any] = {"deterministic": bool(enabled)}
    try:
        if enabled:
            if device.startswith("cuda"):
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = prev_cublas or CUBLAS_WORKSPACE
                record["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
            record.update(
                use_deterministic_algorithms=True,
                cudnn_benchmark=False,
                cudnn_deterministic=True,
            )
        else:
            record["use_deterministic_algorithms"] = prev_algos
        yield record
    finally:
        torch.use_deterministic_algorithms(prev_algos, warn_only=prev_warn_only)
        torch.backends.cudnn.benchmark = prev_benchmark
        torch.backends.cudnn.deterministic = prev_cudnn_det
        if prev_cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = prev_cublas


def loader_generator(seed: int) -> torch.Generator:
    """A CPU generator for DataLoader shuffling (and worker base seeds), seeded with ``seed``."""
    return torch.Generator().manual_seed(int(seed))


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed ``random``/numpy from the worker's torch seed.

    torch gives each worker ``base_seed + worker_id`` (base seed drawn from the loader's
    generator), so workers differ from each other but repeat across runs.
    """
    worker_seed = torch.initial_seed() % NUMPY_SEED_MODULUS
    random.seed(worker_seed)
    np.random.seed(worker_seed)
