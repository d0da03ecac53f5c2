"""What a rank hands to the collectives d5pipe counts: payload bytes, calls, and the wall time it
spends inside them (the per-rank split of d5pipe.levels.level3.rank_split).

The time is taken where the bytes are counted:

* a blocking call (the :class:`~d5pipe.levels.level3.strategies.Communicator`'s collectives and
  point-to-point calls, mpi4py's flat gradient allreduce, Horovod's ``synchronize`` and its
  per-gradient ``_allreduce_grad_async``): ``perf_counter`` around the call (:meth:`ByteCounter.timing`;
  a call inside another timed one is not added twice);
* DDP's buckets, whose allreduces run in the background while the backward pass goes on: the
  communication hook stamps each launch, the future it returns stamps each completion, and the
  step's **exposed** time is from the last launch to the last completion (what the backward pass
  waits for once it has no gradient left to compute; a bucket that finished while later buckets
  were still being computed overlapped with compute and is not counted).

Times are CPU clocks: on a GPU they see when the host waits, not when a kernel runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class ByteCounter:
    """Payload bytes handed to collectives and the number of calls since the last reset, and the
    seconds spent inside them (:meth:`seconds_inside`)."""

    bytes: int = 0
    calls: int = 0
    seconds: float = 0.0
    """Blocking calls' wall time since the last reset."""
    _depth: int = 0
    _launched: float | None = None
    _completed: float | None = None

    def add(self, tensor: torch.Tensor) -> None:
        self.bytes += tensor.numel() * tensor.element_size()
        self.calls += 1

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Add the wall time of the block (the outermost block only, when they nest); under a
        profiler (a profiled pass) the block is also the operator ``d5pipe:collective``."""
        self._depth += 1
        label = torch.profiler.record_function("d5pipe:collective") \
            if self._depth == 1 and torch.autograd._profiler_enabled() else nullcontext()
        t0 = time.perf_counter()
        try:
            with label:
                yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - t0

    def launched(self) -> None:
        """An asynchronous collective (a DDP bucket) starts."""
        self._launched = time.perf_counter()

    def completed(self) -> None:
        """An asynchronous collective ends (called from the engine's thread)."""
        now = time.perf_counter()
        self._completed = now if self._completed is None else max(self._completed, now)

    def seconds_inside(self) -> float:
        """Seconds inside counted collectives since the last reset: the blocking calls' time plus
        the asynchronous ones' exposed time (last launch to last completion)."""
        exposed = 0.0
        if self._launched is not None and self._completed is not None:
            exposed = max(0.0, self._completed - self._launched)
        return self.seconds + exposed

    def reset(self) -> tuple[int, int]:
        """Return ``(bytes, calls)`` and start counting (and timing) from zero."""
        out = (self.bytes, self.calls)
        self.bytes, self.calls, self.seconds = 0, 0, 0.0
        self._launched = self._completed = None
        return out


def counting_ddp_hook(counter: ByteCounter, grad_bucket: type) -> Any:
    """A DDP communication hook that counts each bucket's bytes, stamps its launch and completion
    and then runs torch's stock ``allreduce_hook`` (DDP's behaviour is unchanged)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        counter.completed()
        return fut.value()

    def counting_hook(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        counter.add(bucket.buffer())
        counter.launched()
        return default_hooks.allreduce_hook(None, bucket).then(done)  # type: ignore[arg-type]

    # DDP inspects the hook's annotations as objects; this module's are strings (PEP 563)
    counting_hook.__annotations__ = {"state": object, "bucket": grad_bucket,
                                     "return": torch.futures.Future[torch.Tensor]}
    return counting_hook


def count_horovod(dist_opt: Any, counter: ByteCounter) -> None:
    """Count the gradients a Horovod ``DistributedOptimizer`` hands to ``allreduce_async_`` (its
    per-gradient ``_allreduce_grad_async``) and time those calls and its ``synchronize`` (where
    ``step`` waits for the allreduces)."""
    allreduce, synchronize = dist_opt._allreduce_grad_async, dist_opt.synchronize

    def counting_allreduce(p: torch.nn.Parameter) -> Any:
        counter.add(p.grad if p.grad is not None else p)  # horovod sends zeros for a None grad
        with counter.timing():
            return allreduce(p)

    def timed_synchronize() -> None:
        with counter.timing():
            synchronize()

    # the backward hooks and step() look the methods up on the instance at call time
    dist_opt._allreduce_grad_async = counting_allreduce
    dist_opt.synchronize = timed_synchronize
