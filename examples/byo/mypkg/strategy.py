"""A user distributed strategy: gradients allreduced in float16 (half the bytes of float32).

d5pipe builds it in every rank and calls its hooks with a Communicator that counts the bytes
handed to each collective; ``expected_bytes`` is the strategy's own analytic claim, which the
point reports next to the counted bytes. mpi4py cannot sum float16 buffers, so the strategy
declares the engines it runs on and d5pipe skips the others, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from d5pipe.levels.level3.strategies import Communicator, Strategy, flat_grads, set_grads


class FP16AllReduce(Strategy):
    """Average the gradients with one float16 allreduce per step (lossy: float16 rounding)."""

    name = "fp16"
    exact = False
    consistent = True
    engines = ("ddp", "horovod")

    def after_backward(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        half = flat_grads(params).to(torch.float16)
        summed = comm.allreduce(half)
        set_grads(params, summed.to(torch.float32).div_(comm.size))

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        return 2.0 * n_elements
