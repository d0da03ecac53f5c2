"""A level-0 user operator whose work is scaled by the runner: ``$D5PIPE_BENCH_CALLS`` matrix
products per call (default 20), the last one returned. benchmarks/bench_compare_power.py runs it
with 20 calls and again with 25 (5/4 of the work) or 22 (11/10): a true slowdown of known size with
the same point config and the same source (so the same point IDs), unlike a calibrated sleep, which
is not the noise real kernels see.

Import path ``scaled_work:SCALED_MATMUL`` with ``benchmarks`` on ``PYTHONPATH`` and ``scaled_work``
in the runner's allow-list (``D5PIPE_ALLOW``).
"""

from __future__ import annotations

import dataclasses
import os

import torch

from d5pipe.levels.level0.operators import MATMUL

BASE_CALLS = 20


def calls() -> int:
    """Products per call: ``$D5PIPE_BENCH_CALLS`` (default :data:`BASE_CALLS`)."""
    return int(os.environ.get("D5PIPE_BENCH_CALLS") or BASE_CALLS)


def _scaled_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a @ b
    for _ in range(calls() - 1):
        out = a @ b
    return out


SCALED_MATMUL = dataclasses.replace(MATMUL, name="scaled_matmul", forward=_scaled_matmul,
                                    description="$D5PIPE_BENCH_CALLS matmuls per call, the last returned")
