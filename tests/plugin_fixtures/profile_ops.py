"""An operator whose slowdown comes from one added inner op, for the profile tests (issue 53).

``SORTED_MATMUL`` is a matmul; with ``PROFILE_OPS_EXTRA=1`` in its environment it also sorts its
first input several times per call and throws the result away: the same output, a slower call,
and one operator (``aten::sort``) that a profile names as the change.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from d5pipe.levels.level0.operators import MATMUL

EXTRA = os.environ.get("PROFILE_OPS_EXTRA") == "1"


def _forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if EXTRA:
        for _ in range(8):
            torch.sort(a.flatten())
    return torch.matmul(a, b)


SORTED_MATMUL = dataclasses.replace(MATMUL, name="sorted_matmul", forward=_forward,
                                    description="a matmul; with PROFILE_OPS_EXTRA=1 it also sorts its input")
