"""A machine's FLOP peak as levels 1-3 use it: the FLOP ceiling of a dtype (d5pipe.measure.ceilings,
measured once per machine and thread count, cached on disk), as a :class:`Peak`.

Level 0 goes further and bounds each point by its roofline (d5pipe.levels.level0.point). Networks
are mixes of kernels, so levels 1-3 report % of the FLOP ceiling only (a lower bound on utilisation:
elementwise work is not counted, d5pipe.measure.flops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from d5pipe.measure.ceilings import machine_ceilings


@dataclass(frozen=True)
class Peak:
    """One measured peak rate."""

    best: float
    """The ceiling (units/s): the best rate measured."""
    median: float
    work: float
    what: str


def flops_peak(cache: dict[str, Any], device: str, dtype: torch.dtype) -> Peak | None:
    """The FLOP ceiling of ``dtype`` on ``device`` at this process's thread count; None when no
    matmul runs in ``dtype`` there. ``cache``: the process's ``PointContext.cache`` (saves the
    file read)."""
    ceilings = machine_ceilings("cuda" if device.startswith("cuda") else "cpu", (dtype,), memo=cache)
    best, via = ceilings.flop_ceiling(dtype)
    return Peak(best, best, 0.0, via) if best > 0 else None
