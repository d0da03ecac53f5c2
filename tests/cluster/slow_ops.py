"""A level-0 operator that sleeps, for SLURM walltime and timeout tests (no CPU burnt).

Import path ``slow_ops:SLEEP`` with ``tests/cluster`` on ``PYTHONPATH`` and ``slow_ops`` in the
runner's allow-list (``D5PIPE_ALLOW=slow_ops``). One call sleeps ``operators.size`` seconds: level 0's first
(untimed) call already outlasts a short walltime.
"""

from __future__ import annotations

import time

import torch

from d5pipe.levels.level0.spec import OperatorSpec


def _inputs(size: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.full((1,), float(size), dtype=torch.float64)]


def _sleep(x: torch.Tensor) -> torch.Tensor:
    time.sleep(float(x.item()))
    return x.clone()


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def _no_flops(size: int, batch: int) -> int:
    return 0


def _bytes(size: int, batch: int, itemsize: int) -> int:
    return 2 * itemsize


SLEEP = OperatorSpec(name="sleep", make_inputs=_inputs, forward=_sleep, reference=_identity,
                     flops=_no_flops, min_bytes=_bytes,
                     description="sleeps operators.size seconds per call (tests only)")
