"""Parameter servers (issue 40, after Deep500's consistent and inconsistent parameter servers):
ranks with two roles, over tagged point-to-point messages (mpi4py; d5pipe.levels.level3.backends.PointToPoint).

The last ``servers`` ranks are **servers**, the others **workers**. The flat parameter vector is cut
into ``servers`` contiguous shards (``torch.tensor_split``); server ``j`` owns shard ``j`` and the
optimizer state of it (the point's optimizer class and hyperparameters, over that shard). Each step a
worker computes the gradient of the mean loss on its share of the global batch (the global batch
split evenly over the workers; servers draw none), sends shard ``j`` of it to server ``j`` and
receives the shards of the parameters back. Workers never step an optimizer themselves.

* :class:`SyncParameterServer` (consistent): server ``j`` waits for all ``W`` workers' shards,
  steps its optimizer once on their mean and sends the new shard to every worker. One step equals a
  1-process step on the whole global batch (``exact``: ``matches_serial`` is a verdict), and every
  worker holds the same parameters after every step (``params_identical``).
* :class:`AsyncParameterServer` (inconsistent, bounded staleness ``s``): a server applies each
  worker's gradient as it arrives (an optimizer step on gradient / ``W``, so a round of ``W``
  arrivals moves plain SGD as far as one synchronous step) and replies to that worker at once unless
  the reply would let it run more than ``s`` rounds ahead of the slowest worker (stale-synchronous
  parallel, Ho et al. 2013). The **staleness** of a gradient is how many rounds behind the
  synchronous schedule the parameters it was computed on were: for worker ``w``'s ``p``-th push
  (from 0), ``p`` minus the number of rounds every worker had contributed when the server sent
  those parameters. It is recorded for every applied gradient; ``staleness_bounded`` (max <= ``s``)
  is the point's verdict, the histogram is in its record. Its divergence from the serial model is
  reported (``serial_max_abs_diff``), not failed.

Bytes per step (payload handed to sends, float32): a worker sends its whole gradient (``G`` bytes
over all servers); server ``j`` sends its shard to each of the ``W`` workers (``W x`` shard bytes).
The async server hands out exactly ``W`` replies per step (a reply that is allowed but over that
count waits for the server's next step), so both kinds report the same constant bytes. After the
last step every server sends its final shard to every worker (untimed, uncounted): the workers then
hold the servers' final parameters, which rank 0 (a worker) saves for the test-set evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from d5pipe.levels.level3.backends import StepFn
from d5pipe.levels.level3.strategies import Communicator, Strategy, flat_grads, flat_values, set_values, trainable

GRADIENT, PARAMETERS, FINAL = 41, 42, 43
"""Message tags."""


class ParameterServer(Strategy):
    """What both parameter servers share: roles, shards, the worker's step, the final hand-out."""

    engines = ("mpi",)
    exact = False
    consistent = False

    def __init__(self, servers: int = 1) -> None:
        if int(servers) < 1:
            raise ValueError(f"a parameter server needs servers >= 1, got {servers}")
        self.servers = int(servers)
        self.bounds: list[tuple[int, int]] = []
        self.shard: torch.nn.Parameter | None = None

    def role(self, rank: int, size: int) -> str:
        return "server" if rank >= size - self.servers else "worker"

    def server_ranks(self, size: int) -> list[int]:
        return list(range(size - self.servers, size))

    def unsupported(self, engine: str, ranks: int, global_batch: int) -> str | None:
        if ranks <= self.servers:
            return f"{ranks} rank(s) leave no worker beside {self.servers} server(s)"
        return super().unsupported(engine, ranks, global_batch)

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        self.setup(model, comm)  # rank 0's initial parameters everywhere, servers included
        params = trainable(model)
        flat = flat_values(params)
        cuts = torch.tensor_split(torch.arange(flat.numel()), self.servers)
        self.bounds = [(int(c[0]), int(c[-1]) + 1) if len(c) else (0, 0) for c in cuts]
        if self.role(comm.rank, comm.size) == "worker":
            return self._worker_step(model, params, loss_fn, comm)
        lo, hi = self.bounds[comm.rank - (comm.size - self.servers)]
        self.shard = torch.nn.Parameter(flat[lo:hi].clone())
        try:  # the point's optimizer, over this server's shard
            own = type(optimizer)([self.shard], **optimizer.defaults)
        except TypeError as exc:
            raise RuntimeError(f"cannot rebuild the optimizer {type(optimizer).__name__} over a server's shard "
                               f"from its defaults: {exc}") from exc
        return self._server_step(comm, self.shard, own, self.workers(comm.size))

    def _worker_step(self, model: torch.nn.Module, params: list[torch.nn.Parameter],
                     loss_fn: Callable[..., torch.Tensor], comm: Communicator) -> StepFn:
        servers = self.server_ranks(comm.size)
        incoming = flat_values(params).clone()

        def step(x: torch.Tensor, y: torch.Tensor) -> float:
            for p in params:
                p.grad = None
            loss = loss_fn(model(x), y)
            loss.backward()
            with torch.no_grad():
                grad = flat_grads(params).contiguous()
                shards = list(zip(servers, self.bounds))
                # every receive is posted before any wait: no server's reply waits on another's
                comm.waitall([comm.isend(grad[lo:hi], server, GRADIENT) for server, (lo, hi) in shards] +
                             [comm.irecv(incoming[lo:hi], server, PARAMETERS) for server, (lo, hi) in shards])
                set_values(params, incoming)
            return float(loss.detach())

        return step

    def _server_step(self, comm: Communicator, shard: torch.nn.Parameter, optimizer: torch.optim.Optimizer,
                     workers: list[int]) -> StepFn:
        """A server's step: ``optimizer`` over its ``shard``, with the gradients of ``workers``."""
        raise NotImplementedError

    def _reply(self, comm: Communicator, worker: int, tag: int) -> tuple[Any, torch.Tensor]:
        assert self.shard is not None
        payload = self.shard.detach().clone()  # the shard moves on while the send is in flight
        return comm.isend(payload, worker, tag), payload

    def finish(self, model: torch.nn.Module, comm: Communicator) -> None:
        """Every server's final shard to every worker: the workers end with the servers' parameters."""
        params = trainable(model)
        if self.role(comm.rank, comm.size) == "server":
            sent = [self._reply(comm, w, FINAL) for w in self.workers(comm.size)]
            comm.waitall([request for request, _ in sent])
            return
        final = flat_values(params).clone()
        comm.waitall([comm.irecv(final[lo:hi], server, FINAL)
                      for server, (lo, hi) in zip(self.server_ranks(comm.size), self.bounds)])
        set_values(params, final)

    def role_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                   engine: str) -> dict[str, float]:
        """A worker sends its gradient (``G``); a server its shard to each worker (``W x G / S``)."""
        workers = ranks - self.servers
        if workers < 1:
            return {"worker": math.nan, "server": math.nan}
        return {"worker": float(grad_bytes), "server": workers * grad_bytes / self.servers}

    def expected_bytes(self, grad_bytes: int, n_elements: int, ranks: int, steps: Sequence[int],
                       engine: str) -> float:
        """The mean over all ranks: ``2 W G / n``."""
        if ranks <= self.servers:
            return math.nan
        return 2.0 * (ranks - self.servers) * grad_bytes / ranks


class SyncParameterServer(ParameterServer):
    """Consistent parameter server: every step, the mean of all workers' gradients (module docstring)."""

    name = "ps_sync"
    exact = True
    consistent = True

    def _server_step(self, comm: Communicator, shard: torch.nn.Parameter, optimizer: torch.optim.Optimizer,
                     workers: list[int]) -> StepFn:
        incoming = torch.empty_like(shard.detach())

        def step(x: torch.Tensor, y: torch.Tensor) -> float:
            with torch.no_grad():
                total = torch.zeros_like(incoming)
                for worker in workers:  # in rank order: the same sum every run
                    comm.recv(incoming, worker, GRADIENT)
                    total += incoming
                shard.grad = total.div_(len(workers))
            optimizer.step()
            sent = [self._reply(comm, worker, PARAMETERS) for worker in workers]
            comm.waitall([request for request, _ in sent])
            return math.nan

        return step


class AsyncParameterServer(ParameterServer):
    """Inconsistent parameter server with bounded staleness ``s`` (module docstring)."""

    name = "ps_async"
    lockstep = False

    def __init__(self, servers: int = 1, staleness: int = 2) -> None:
        super().__init__(servers)
        if int(staleness) < 0:
            raise ValueError(f"staleness must be >= 0, got {staleness}")
        self.staleness_bound = int(staleness)
        """The most rounds a worker's parameters may lag behind (``staleness``, the configured bound)."""
        self.observed_staleness: list[int] = []
        """The staleness of every gradient this server applied, in the order applied (what happened)."""

    def _server_step(self, comm: Communicator, shard: torch.nn.Parameter, optimizer: torch.optim.Optimizer,
                     workers: list[int]) -> StepFn:
        slot = {rank: i for i, rank in enumerate(workers)}
        applied = [0] * len(workers)  # pushes applied, per worker
        sent_rounds = [0] * len(workers)  # complete rounds in the parameters each worker holds
        waiting: list[int] = []  # workers whose reply is due, in arrival order
        incoming = torch.empty_like(shard.detach())

        def step(x: torch.Tensor, y: torch.Tensor) -> float:
            sent: list[tuple[Any, torch.Tensor]] = []
            while True:
                for w in list(waiting):  # replies the bound allows, at most W per step
                    if len(sent) < len(workers) and applied[w] - min(applied) <= self.staleness_bound:
                        waiting.remove(w)
                        sent.append(self._reply(comm, workers[w], PARAMETERS))
                        sent_rounds[w] = min(applied)
                if len(sent) == len(workers):
                    break
                w = slot[comm.recv(incoming, None, GRADIENT)]
                self.observed_staleness.append(applied[w] - sent_rounds[w])
                with torch.no_grad():
                    shard.grad = incoming.div(len(workers))
                optimizer.step()
                applied[w] += 1
                waiting.append(w)
            comm.waitall([request for request, _ in sent])
            return math.nan

        return step

    def observed(self) -> dict[str, Any]:
        return ({"staleness": list(self.observed_staleness), "staleness_bound": self.staleness_bound}
                if self.shard is not None else {})
