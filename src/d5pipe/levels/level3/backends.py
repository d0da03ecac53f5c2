"""The three data-parallel engines, behind one small interface, each counting the bytes it hands
to collectives.

* ``ddp``: ``torch.nn.parallel.DistributedDataParallel`` over gloo (CPU) or nccl (CUDA). Gradient
  bytes are counted by a DDP communication hook that records each bucket's size and then runs
  torch's stock ``allreduce_hook`` (so DDP's behaviour is unchanged).
* ``horovod``: ``horovod.torch.DistributedOptimizer`` + ``broadcast_parameters``. Bytes are counted
  by wrapping the optimizer's per-gradient ``_allreduce_grad_async`` (the call that hands each
  gradient tensor to ``allreduce_async_``).
* ``mpi``: a hand-written step: mpi4py ``Allreduce`` (sum) of the flattened gradients, then divide
  by the number of ranks. Bytes are the flat buffer's size.

"Bytes counted" are the payload bytes handed to the collective by one rank per step (what the
collective reduces), not bytes on the wire; a ring allreduce sends ``2(n-1)/n`` times the payload
per rank (see :mod:`d5pipe.levels.level3.scaling`). The counters, the DDP hook and the Horovod
wrapper, which also time the calls they count, are in d5pipe.levels.level3.counting.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.level3.counting import ByteCounter, count_horovod, counting_ddp_hook

StepFn = Callable[[torch.Tensor, torch.Tensor], float]
"""One training step on a local batch ``(x, y)``; returns the local loss."""


class Backend(Protocol):
    """What the worker needs from an engine."""

    name: str
    rank: int
    size: int
    counter: ByteCounter

    def barrier(self) -> None: ...

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place where the engine allows it; returns the result."""
        ...

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's values everywhere; returns the result."""
        ...

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenation of every rank's ``t`` (1-D) in rank order."""
        ...

    def prepared(self, collective: str, t: torch.Tensor) -> Callable[[], torch.Tensor]:
        """``collective`` (``allreduce``, ``broadcast`` or ``allgather``) on ``t`` as a call without
        arguments that returns the result: what a collective benchmark times and checks. Whatever the
        engine's call needs besides ``t`` is made once here, as a peer benchmark's loop holds its buffers."""
        ...

    def exchange(self, t: torch.Tensor, peers: list[int]) -> list[torch.Tensor]:
        """Send ``t`` to every rank of ``peers`` and receive a tensor like it from each (point to
        point; every peer must name this rank among its own peers); in the order of ``peers``."""
        ...

    def make_train_step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor]
    ) -> StepFn:
        """Broadcast rank 0's parameters, wrap model/optimizer, return the step function."""
        ...

    def finalize(self) -> None: ...


@runtime_checkable
class PointToPoint(Protocol):
    """Tagged point-to-point messages with receives from any rank (what a parameter server needs;
    mpi4py has them, d5pipe.levels.level3.parameter_server)."""

    def isend(self, t: torch.Tensor, dest: int, tag: int) -> Any:
        """Start sending ``t`` (contiguous, CPU) to ``dest``; returns a request for :meth:`waitall`."""
        ...

    def recv(self, buf: torch.Tensor, source: int | None, tag: int) -> int:
        """Receive into ``buf`` from ``source`` (None: any rank); returns the sender's rank."""
        ...

    def irecv(self, buf: torch.Tensor, source: int, tag: int) -> Any:
        """Start receiving into ``buf`` from ``source``; returns a request for :meth:`waitall`."""
        ...

    def waitall(self, requests: list[Any]) -> None: ...


def plain_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor],
    after_backward: Callable[[int], None] | None = None, after_step: Callable[[int], None] | None = None,
) -> StepFn:
    """``step(x, y) -> loss``: ``zero_grad``, forward, loss, backward, ``after_backward(i)``,
    ``optimizer.step()``, ``after_step(i)`` (the hooks under ``torch.no_grad``; ``i`` counts steps from 0)."""
    counter = itertools.count()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        i = next(counter)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if after_backward is not None:
            with torch.no_grad():
                after_backward(i)
        optimizer.step()
        if after_step is not None:
            with torch.no_grad():
                after_step(i)
        return float(loss.detach())

    return step


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_grads(params: Sequence[torch.nn.Parameter], out: torch.Tensor | None = None) -> torch.Tensor:
    """The gradients as one flat tensor (zeros where a parameter got none), written to ``out`` if given."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params], out=out)


def set_grads(params: Sequence[torch.nn.Parameter], flat: torch.Tensor) -> None:
    for p, grad in zip(params, flat.split([p.numel() for p in params])):
        p.grad = grad.view_as(p).clone()


def flat_values(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def set_values(params: Sequence[torch.nn.Parameter], flat: torch.Tensor) -> None:
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(flat, list(params))


class DdpBackend:
    """torch.distributed process group + DistributedDataParallel."""

    name = "ddp"

    def __init__(self, rank: int, size: int, device: torch.device, timeout_s: float) -> None:
        import datetime

        import torch.distributed as dist

        self._dist = dist
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.rank, self.size, self.device = rank, size, device
        self.counter = ByteCounter()

    def barrier(self) -> None:
        self._dist.barrier()

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        self._dist.all_reduce(t)
        return t

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        self._dist.broadcast(t, src=0)
        return t

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.numel() * self.size, dtype=t.dtype, device=t.device)
        self._dist.all_gather(list(out.chunk(self.size)), t)
        return out

    def prepared(self, collective: str, t: torch.Tensor) -> Callable[[], torch.Tensor]:
        return functools.partial(getattr(self, collective), t)  # torch.distributed takes the tensor itself

    def exchange(self, t: torch.Tensor, peers: list[int]) -> list[torch.Tensor]:
        dist = self._dist
        bufs = [torch.empty_like(t) for _ in peers]
        ops = []
        for peer, buf in zip(peers, bufs):
            ops += [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, buf, peer)]
        for req in dist.batch_isend_irecv(ops) if ops else []:
            req.wait()
        return bufs

    def make_train_step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor]
    ) -> StepFn:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)  # broadcasts rank 0's parameters
        ddp.register_comm_hook(None, counting_ddp_hook(self.counter, self._dist.GradBucket))
        return plain_step(ddp, optimizer, loss_fn)

    def finalize(self) -> None:
        self._dist.destroy_process_group()


class HorovodBackend:
    """horovod.torch over MPI (launched with mpirun/srun)."""

    name = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd

        hvd.init()
        self._hvd = hvd
        self.rank, self.size = int(hvd.rank()), int(hvd.size())
        self.counter = ByteCounter()
        self._models = 0

    def barrier(self) -> None:
        self._hvd.barrier()

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        return self._hvd.allreduce_(t, op=self._hvd.Sum)

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        return self._hvd.broadcast_(t, root_rank=0)

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        return self._hvd.allgather(t)

    def prepared(self, collective: str, t: torch.Tensor) -> Callable[[], torch.Tensor]:
        return functools.partial(getattr(self, collective), t)  # Horovod takes the tensor itself

    def exchange(self, t: torch.Tensor, peers: list[int]) -> list[torch.Tensor]:
        """Horovod has no send/recv: one ``alltoall`` whose splits reach exactly ``peers``."""
        flat = t.reshape(-1)
        wanted = set(peers)
        splits = torch.tensor([flat.numel() if r in wanted else 0 for r in range(self.size)], dtype=torch.int32)
        send = torch.cat([flat] * len(wanted)) if wanted else flat[:0]
        out, received = self._hvd.alltoall(send, splits=splits)
        chunks = out.split([int(n) for n in received.tolist()])  # one per rank, in rank order
        return [chunks[p].view_as(t) for p in peers]

    def make_train_step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor]
    ) -> StepFn:
        hvd = self._hvd
        # each model of a rank session gets its own tensor names: Horovod keys its operations
        # by name, and the next point's model may reuse a name with another shape
        self._models += 1
        prefix = f"m{self._models}."
        hvd.broadcast_parameters([(prefix + n, t) for n, t in model.state_dict().items()], root_rank=0)
        dist_opt = hvd.DistributedOptimizer(
            optimizer, named_parameters=[(prefix + n, p) for n, p in model.named_parameters()])
        if optimizer.state_dict()["state"]:
            # Only a resumed optimizer has state to share. For an empty one Horovod would take a
            # zero-gradient step to create it, which advances Adam's step count and makes the run
            # differ from the 1-process reference; a fresh optimizer is identical on all ranks.
            hvd.broadcast_optimizer_state(dist_opt, root_rank=0)
        count_horovod(dist_opt, self.counter)
        return plain_step(model, dist_opt, loss_fn)

    def finalize(self) -> None:
        self._hvd.shutdown()


class MpiBackend:
    """mpi4py on COMM_WORLD; the data-parallel step is written out by hand."""

    name = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = int(self.comm.Get_rank()), int(self.comm.Get_size())
        self.counter = ByteCounter()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        self.comm.Allreduce(self._mpi.IN_PLACE, t.numpy(), op=self._mpi.SUM)
        return t

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        self.comm.Bcast(t.numpy(), root=0)
        return t

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.numel() * self.size, dtype=t.dtype)
        self.comm.Allgather(t.numpy(), out.numpy())
        return out

    def prepared(self, collective: str, t: torch.Tensor) -> Callable[[], torch.Tensor]:
        """mpi4py's call on numpy views of ``t`` (and of the gathered output) taken once: the
        per-call ``t.numpy()`` of the methods above cost about 1.2 us of a 90 us allreduce at 1 MiB
        (docs/performance.md), which an OSU-style loop on one buffer does not pay."""
        comm, mpi, view = self.comm, self._mpi, t.numpy()
        if collective == "allreduce":
            def call() -> torch.Tensor:
                comm.Allreduce(mpi.IN_PLACE, view, op=mpi.SUM)
                return t
        elif collective == "broadcast":
            def call() -> torch.Tensor:
                comm.Bcast(view, root=0)
                return t
        elif collective == "allgather":
            out = torch.empty(t.numel() * self.size, dtype=t.dtype)
            out_view = out.numpy()

            def call() -> torch.Tensor:
                comm.Allgather(view, out_view)
                return out
        else:
            raise D5PipeError(f"distributed.collective: unknown value {collective!r}")
        return call

    def exchange(self, t: torch.Tensor, peers: list[int]) -> list[torch.Tensor]:
        bufs = [torch.empty_like(t) for _ in peers]
        reqs = []
        for peer, buf in zip(peers, bufs):
            reqs += [self.comm.Isend(t.numpy(), dest=peer), self.comm.Irecv(buf.numpy(), source=peer)]
        self._mpi.Request.Waitall(reqs)
        return bufs

    def isend(self, t: torch.Tensor, dest: int, tag: int) -> Any:
        return self.comm.Isend(t.numpy(), dest=dest, tag=tag)

    def recv(self, buf: torch.Tensor, source: int | None, tag: int) -> int:
        status = self._mpi.Status()
        self.comm.Recv(buf.numpy(), source=self._mpi.ANY_SOURCE if source is None else source, tag=tag,
                       status=status)
        return int(status.Get_source())

    def irecv(self, buf: torch.Tensor, source: int, tag: int) -> Any:
        return self.comm.Irecv(buf.numpy(), source=source, tag=tag)

    def waitall(self, requests: list[Any]) -> None:
        self._mpi.Request.Waitall(requests)

    def make_train_step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor]
    ) -> StepFn:
        params = trainable(model)
        flat = self.broadcast(flat_values(params))
        set_values(params, flat)
        grad_buf = torch.zeros_like(flat)
        counter, size, sizes = self.counter, self.size, [p.numel() for p in params]

        def average_grads(step: int) -> None:
            counter.add(flat_grads(params, out=grad_buf))
            with counter.timing():
                self.allreduce(grad_buf)
            grad_buf.div_(size)
            for p, grad in zip(params, grad_buf.split(sizes)):
                if p.grad is not None:
                    p.grad.copy_(grad.view_as(p.grad))

        return plain_step(model, optimizer, loss_fn, after_backward=average_grads)

    def finalize(self) -> None:
        self.comm.Barrier()


def rank_from_env() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun, Open MPI, PMIx or SLURM variables."""
    pairs = (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ("PMIX_RANK", "D5PIPE_WORLD_SIZE", "PMIX_RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    )
    for rank_var, size_var, local_var in pairs:
        if rank_var in os.environ and size_var in os.environ:
            rank, size = int(os.environ[rank_var]), int(os.environ[size_var])
            return rank, size, int(os.environ.get(local_var, rank))
    return 0, 1, 0


def make_backend(name: str, device: torch.device, timeout_s: float) -> Backend:
    """Initialise the engine ``name`` in this rank process."""
    if name == "ddp":
        rank, size, _ = rank_from_env()
        return DdpBackend(rank, size, device, timeout_s)
    if device.type != "cpu":
        raise D5PipeError(f"distributed.backend: {name!r} runs on CPU only here, got device {device}")
    if name == "horovod":
        return HorovodBackend()
    if name == "mpi":
        return MpiBackend()
    raise D5PipeError(f"distributed.backend: unknown value {name!r}; known: ['ddp', 'horovod', 'mpi']")
