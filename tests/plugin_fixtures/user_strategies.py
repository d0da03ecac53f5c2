"""User strategies for tests/test_parameter_servers.py: the asynchronous parameter server with one
deliberately slow worker (rank 1 sleeps half a second before each step), so the fast workers run ahead until the
staleness bound stops them; and docs/plugins.md's asynchronous example, as written there. For
tests/test_rank_split.py: the engine's allreduce with rank 1 sleeping before each step (a straggler)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from d5pipe.levels.level3.backends import StepFn
from d5pipe.levels.level3.parameter_server import AsyncParameterServer
from d5pipe.levels.level3.strategies import AllReduce, Communicator, Strategy, flat_values, set_values


def _rank1_slowed(step: StepFn, comm: Communicator, delay_s: float) -> StepFn:
    """Rank 1's ``step`` sleeping ``delay_s`` first (other ranks' unchanged)."""
    if comm.rank != 1:
        return step

    def slow(x: torch.Tensor, y: torch.Tensor) -> float:
        time.sleep(delay_s)
        return step(x, y)

    return slow


class SlowWorkerAsync(AsyncParameterServer):
    name = "ps_async_slow_worker"

    def __init__(self, staleness: int = 2, delay_s: float = 0.5) -> None:
        super().__init__(servers=1, staleness=staleness)
        self.delay_s = float(delay_s)

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        return _rank1_slowed(super().make_step(model, optimizer, loss_fn, comm), comm, self.delay_s)


class Gossip(Strategy):  # docs/plugins.md, "Writing an asynchronous strategy"
    name, consistent, lockstep = "gossip", False, False   # no barrier before a step
    engines = ("mpi",)                                     # tagged isend/recv: mpi4py

    def after_step(self, params, comm, step):
        mine = flat_values(params).clone()
        shift = 1 + step % (comm.size - 1)               # another partner every step
        theirs = torch.empty_like(mine)
        requests = [comm.isend(mine, (comm.rank + shift) % comm.size, tag=7),  # counted: numel x 4 bytes
                    comm.irecv(theirs, (comm.rank - shift) % comm.size, tag=7)]
        comm.waitall(requests)                           # only these two partners wait for each other
        set_values(params, (mine + theirs) / 2)

    def expected_bytes(self, grad_bytes, n_elements, ranks, steps, engine):
        return float(grad_bytes)


class SlowRankAllReduce(AllReduce):
    """The engine's own allreduce (DDP's hook, Horovod's DistributedOptimizer), rank 1 sleeping
    ``delay_s`` at the start of each of its steps: compute only it does, which the others wait for."""

    name = "allreduce_slow_rank"

    def __init__(self, delay_s: float = 0.1) -> None:
        self.delay_s = float(delay_s)

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        return _rank1_slowed(super().make_step(model, optimizer, loss_fn, comm), comm, self.delay_s)
