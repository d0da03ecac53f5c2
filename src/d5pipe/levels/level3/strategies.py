"""Distributed strategies: how the ranks exchange gradients or parameters each training step.

A strategy is a target (``distributed.strategy``: a built-in name or a key of
``distributed.custom_strategies``; d5pipe.levels.targets) built in every rank. It talks to the
other ranks only through a :class:`Communicator`, which d5pipe provides over the point's engine
(DDP/gloo, Horovod, mpi4py; d5pipe.levels.level3.backends) and which counts, at each call, the
payload bytes this rank hands over: ``allreduce``/``allgather``/``broadcast`` count their input,
``exchange`` (point to point) counts its input once per peer.

Contract of a :class:`Strategy` subclass:

* ``make_step(model, optimizer, loss_fn, comm)`` returns ``step(x, y) -> loss`` for this rank's
  slice of each global batch. The default makes rank 0's parameters everyone's
  (:meth:`Strategy.setup`), then per step: ``zero_grad``, forward, mean loss, backward,
  :meth:`~Strategy.after_backward` (exchange gradients), ``optimizer.step()``,
  :meth:`~Strategy.after_step` (exchange parameters); override the two hooks, or ``make_step``;
* ``expected_bytes(grad_bytes, n_elements, ranks, steps, engine)``: its **analytic** payload bytes per rank
  per step, averaged over the timed global step indices ``steps`` -- the point reports it next to
  the counted bytes (``comm_expected_payload_bytes_per_rank_step``, ``comm_payload_vs_expected``);
* ``exact``: training equals the 1-process model on the same global batches up to rounding
  (``matches_serial`` is then a verdict; otherwise only ``serial_max_abs_diff`` is reported);
* ``consistent``: every rank holds the same parameters after every step (``params_identical``
  is then a verdict, otherwise the info metric ``replicas_identical``);
* ``engines``: the backends it runs on (others are skipped with the reason).

Built-ins: :class:`AllReduce` (the engine's own synchronous gradient allreduce: DDP buckets,
Horovod's DistributedOptimizer, the flat mpi4py allreduce; exact), :class:`TopK` (top-k gradient
compression with error feedback: values and indices allgathered, 8k bytes per step), :class:`LocalSGD`
(local steps, parameters averaged by allreduce every ``period`` steps) and :class:`RingAverage`
(decentralised: after each local step a rank averages its parameters with its two ring
neighbours, exchanged point to point), :class:`DPSGD` (the same ring, mixing before the step, as
D-PSGD does). Model averaging every ``k`` steps is :class:`LocalSGD`. Parameter servers, whose ranks
play two roles, are in d5pipe.levels.level3.parameter_server.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from d5pipe.levels.level3.backends import (
    Backend,
    PointToPoint,
    StepFn,
    flat_grads,
    flat_values,
    plain_step,
    set_grads,
    set_values,
    trainable,
)
from d5pipe.levels.level3.schema import BACKENDS


class Communicator:
    """Collectives over the point's engine; counts the payload this rank hands to each call and
    times every call (d5pipe.levels.level3.counting)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.rank, self.size, self.engine = backend.rank, backend.size, backend.name
        self.counter = backend.counter

    def _counted(self, call: Callable[..., Any], t: torch.Tensor, *args: Any, copies: int = 1) -> Any:
        """``call(t, *args)`` timed, with ``t`` counted ``copies`` times (once per peer it goes to)."""
        for _ in range(copies):
            self.counter.add(t)
        with self.counter.timing():
            return call(t, *args)

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (in place where the engine allows it)."""
        return self._counted(self.backend.allreduce, t)

    def allreduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        """Mean over ranks."""
        return self.allreduce(t).div_(self.size)

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's values everywhere."""
        return self._counted(self.backend.broadcast, t)

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's 1-D ``t``, concatenated in rank order."""
        return self._counted(self.backend.allgather, t)

    def exchange(self, t: torch.Tensor, peers: Sequence[int]) -> list[torch.Tensor]:
        """Send ``t`` to each peer, receive one like it from each (peers must be symmetric)."""
        return self._counted(self.backend.exchange, t, list(peers), copies=len(peers))

    def _p2p(self) -> PointToPoint:
        if not isinstance(self.backend, PointToPoint):
            raise RuntimeError(f"engine {self.engine!r} has no tagged point-to-point messages (mpi4py has)")
        return self.backend

    def isend(self, t: torch.Tensor, dest: int, tag: int) -> Any:
        """Start sending ``t`` to rank ``dest`` (counted); finish with :meth:`waitall`."""
        return self._counted(self._p2p().isend, t, dest, tag)

    def recv(self, buf: torch.Tensor, source: int | None, tag: int) -> int:
        """Receive into ``buf`` from ``source`` (None: whichever rank sends first); the sender's rank."""
        with self.counter.timing():
            return self._p2p().recv(buf, source, tag)

    def irecv(self, buf: torch.Tensor, source: int, tag: int) -> Any:
        """Start receiving into ``buf`` from rank ``source``; finish with :meth:`waitall`."""
        with self.counter.timing():
            return self._p2p().irecv(buf, source, tag)

    def waitall(self, requests: list[Any]) -> None:
        with self.counter.timing():
            self._p2p().waitall(requests)


class Strategy:
    """Base class of distributed strategies (see the module docstring for the contract)."""

    name = "custom"
    exact = False
    consistent = True
    engines: tuple[str, ...] = BACKENDS
    lockstep = True
    """Every step starts after a barrier of all ranks (an asynchronous strategy says False)."""

    def role(self, rank: int, size: int) -> str:
        """What rank ``rank`` of ``size`` does: ``worker`` (trains on a share of each global batch
        and holds the model) or another role of the strategy's own (a parameter server's ``server``)."""
        return "worker"

    def workers(self, size: int) -> list[int]:
        return [r for r in range(size) if self.role(r, size) == "worker"]

    def share(self, indices: np.ndarray, rank: int, size: int) -> np.ndarray:
        """Rank ``rank``'s slice of a global batch: an equal share per worker, none for other roles."""
        workers = self.workers(size)
        if rank not in workers:
            return indices[:0]
        per = len(indices) // len(workers)
        i = workers.index(rank)
        return indices[i * per: (i + 1) * per]

    def unsupported(self, engine: str, ranks: int, global_batch: int) -> str | None:
        """Why a point cannot run this strategy (it is skipped with the reason), or None."""
        if engine not in self.engines:
            return f"it does not run on backend {engine!r} (it supports {', '.join(self.engines)})"
        workers = len(self.workers(ranks))
        if workers == 0:
            return f"{ranks} rank(s) leave no worker"
        if global_batch % workers:
            return f"the global batch of {global_batch} does not split evenly over its {workers} workers"
        return None

    def finish(self, model: torch.nn.Module, comm: Communicator) -> None:
        """After the last step, untimed and uncounted (a parameter server hands out its final
        parameters); default: nothing."""

    def observed(self) -> dict[str, Any]:
        """What this rank saw that the point should report (a parameter server's staleness)."""
        return {}

    def role_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                   engine: str) -> dict[str, float]:
        """Analytic payload bytes per step of one rank of each role (one role: :meth:`expected_bytes`)."""
        return {"worker": self.expected_bytes(grad_bytes, n_elements, ranks, steps, engine)}

    def setup(self, model: torch.nn.Module, comm: Communicator) -> None:
        """Make rank 0's parameters every rank's (one broadcast, not counted as per-step traffic)."""
        params = trainable(model)
        flat = comm.broadcast(flat_values(params).clone())
        set_values(params, flat)

    def after_backward(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        """Exchange gradients (``p.grad``) before the optimizer step; default: nothing."""

    def after_step(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        """Exchange parameters after the optimizer step; default: nothing."""

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        """``step(x, y) -> loss`` (module docstring); global step indices count from 0."""
        self.setup(model, comm)
        params = trainable(model)
        return plain_step(model, optimizer, loss_fn, lambda i: self.after_backward(params, comm, i),
                          lambda i: self.after_step(params, comm, i))

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        """Analytic payload bytes per rank per step, averaged over ``steps``; NaN when unknown."""
        return math.nan


class AllReduce(Strategy):
    """The engine's synchronous gradient allreduce (today's data-parallel step; exact)."""

    name = "allreduce"
    exact = True

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        return comm.backend.make_train_step(model, optimizer, loss_fn)

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        """The whole gradient each step (Horovod hands nothing to a collective on 1 rank)."""
        return 0.0 if engine == "horovod" and ranks == 1 else float(grad_bytes)


class TopK(Strategy):
    """Top-k gradient compression with error feedback (lossy, replicas stay identical).

    Each rank adds its residual to its gradient, keeps the ``k = ceil(ratio * n)`` entries of
    largest magnitude (the rest becomes the new residual) and allgathers them as one float32
    buffer of ``k`` values and ``k`` int32 indices (bit-cast): ``8k`` bytes per step. Every rank
    sums the gathered sparse gradients and divides by the number of ranks.
    """

    name = "topk"

    def __init__(self, ratio: float = 0.01) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"TopK ratio must be in (0, 1], got {ratio}")
        self.ratio = float(ratio)
        self.residual: torch.Tensor | None = None

    def k(self, n: int) -> int:
        return max(1, math.ceil(self.ratio * n))

    def after_backward(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        grad = flat_grads(params)
        if self.residual is None:
            self.residual = torch.zeros_like(grad)
        grad = grad + self.residual
        k = self.k(grad.numel())
        idx = grad.abs().topk(k, sorted=False).indices
        values = grad[idx]
        self.residual = grad.index_fill(0, idx, 0.0)
        packed = torch.cat([values.to(torch.float32), idx.to(torch.int32).view(torch.float32)])
        gathered = comm.allgather(packed).view(comm.size, 2 * k)
        dense = torch.zeros_like(grad)
        dense.index_add_(0, gathered[:, k:].contiguous().view(torch.int32).reshape(-1).long(),
                         gathered[:, :k].reshape(-1).to(grad.dtype))
        set_grads(params, dense.div_(comm.size))

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        return 8.0 * self.k(n_elements)


class LocalSGD(Strategy):
    """Local SGD: each rank steps alone; every ``period`` steps the parameters are averaged
    (one allreduce of all parameters after global steps ``period - 1``, ``2 period - 1``, ...)."""

    name = "local_sgd"
    consistent = False

    def __init__(self, period: int = 4) -> None:
        if period < 1:
            raise ValueError(f"LocalSGD period must be >= 1, got {period}")
        self.period = int(period)

    def syncs(self, step: int) -> bool:
        return (step + 1) % self.period == 0

    def after_step(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        if self.syncs(step):
            set_values(params, comm.allreduce_mean(flat_values(params).clone()))

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        if not steps:
            return math.nan
        return grad_bytes * sum(self.syncs(i) for i in steps) / len(steps)


class RingAverage(Strategy):
    """Decentralised averaging (D-PSGD on a ring): after each local step, rank ``r`` replaces its
    parameters by the mean of its own and those of ranks ``r-1`` and ``r+1`` (one neighbour on
    2 ranks, none on 1), exchanged point to point: ``min(2, n-1)`` x the parameter bytes per step."""

    name = "ring"
    consistent = False

    @staticmethod
    def peers(rank: int, size: int) -> list[int]:
        return sorted({(rank - 1) % size, (rank + 1) % size} - {rank})

    def after_step(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        peers = self.peers(comm.rank, comm.size)
        if not peers:
            return
        mine = flat_values(params).clone()
        received = comm.exchange(mine, peers)
        set_values(params, (mine + sum(received)) / (1 + len(peers)))

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        return float(grad_bytes * len(self.peers(0, ranks)))


class DPSGD(RingAverage):
    """D-PSGD (Lian et al. 2017) on the ring: each rank mixes its *current* parameters with its ring
    neighbours' (uniform weights) and applies its own gradient, computed at its current parameters,
    to the mix -- ``x_r <- mean(x_{r-1}, x_r, x_{r+1}) - lr * g_r(x_r)`` for SGD. :class:`RingAverage`
    steps first and then averages, which also mixes the neighbours' gradients; the bytes are the same."""

    name = "dpsgd"

    def after_backward(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        RingAverage.after_step(self, params, comm, step)

    def after_step(self, params: list[torch.nn.Parameter], comm: Communicator, step: int) -> None:
        """Nothing: the mixing happened before the optimizer step."""
