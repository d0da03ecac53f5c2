"""A level-0 user operator that sleeps ``$D5PIPE_BENCH_DELAY_S`` seconds, then multiplies: a slowdown
of known size for benchmarks/bench_aa_compare.py (the same point config, really slower).

Import path ``calibrated_sleep:SLEEP_MATMUL`` with ``benchmarks`` on ``PYTHONPATH`` and
``calibrated_sleep`` in the runner's allow-list (``D5PIPE_ALLOW``).
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch

from d5pipe.levels.level0.operators import MATMUL


def _sleepy_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    time.sleep(float(os.environ.get("D5PIPE_BENCH_DELAY_S") or 0.0))
    return a @ b


SLEEP_MATMUL = dataclasses.replace(MATMUL, name="calibrated_sleep", forward=_sleepy_matmul,
                                   description="a matmul after sleeping $D5PIPE_BENCH_DELAY_S seconds")
