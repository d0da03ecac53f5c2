"""Version 2 of the user operator of tests/test_ab.py: three matrix products per call (3x the work)."""

from __future__ import annotations

import dataclasses

import torch

from d5pipe.levels.level0.operators import MATMUL

WORK = 3


def _forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a @ b
    for _ in range(WORK - 1):
        out = a @ b
    return out


OP = dataclasses.replace(MATMUL, name="abop", forward=_forward, description=f"{WORK} matmul(s) per call")
