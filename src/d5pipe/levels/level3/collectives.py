"""Collective microbenchmarks (allreduce, broadcast, allgather) and their bandwidths.

Bandwidths follow nccl-tests (``doc/PERFORMANCE.md``):

* ``algbw = S / t`` where ``S`` is the message size and ``t`` the time of one operation;
* ``busbw = algbw * factor(n)``, the factor making the number comparable to the link bandwidth:
  allreduce ``2(n-1)/n``, allgather ``(n-1)/n``, broadcast ``1``.

As in nccl-tests, ``S`` for allgather is the size of the *gathered* buffer (each rank contributes
``S/n``); for allreduce and broadcast it is the buffer each rank holds.

Timing: every iteration starts after a barrier; each rank times its own call (the engine's call
with its buffers made once, as a peer benchmark's loop holds them: ``Backend.prepared``; the
correctness check runs the same call); the iteration's time
is the **maximum over ranks** (the operation is done when the slowest rank has it). The statistics
(median + order-statistic CI) are computed on those per-iteration maxima. The buffer is the
engine's own tensor or one allocated as the engine's peer benchmarks allocate theirs
(``distributed.buffer``, d5pipe.levels.level3.placement.allocate), recorded with the result.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.level3.backends import Backend
from d5pipe.levels.level3.placement import allocate
from d5pipe.levels.level3.schema import COLLECTIVES, FLOAT_BYTES


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``collective`` on ``ranks`` ranks."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if collective == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if collective == "allgather":
        return (ranks - 1) / ranks
    if collective == "broadcast":
        return 1.0
    raise D5PipeError(f"distributed.collective: unknown value {collective!r}; known: {list(COLLECTIVES)}")


def elements_per_rank(collective: str, message_bytes: int, ranks: int) -> int:
    """float32 elements each rank contributes for a requested message size (at least 1)."""
    if message_bytes < FLOAT_BYTES:
        raise D5PipeError(f"distributed.message_bytes: must be >= {FLOAT_BYTES}, got {message_bytes}")
    total = message_bytes // FLOAT_BYTES
    if collective == "allgather":
        return max(1, total // ranks)
    return total


def actual_message_bytes(collective: str, message_bytes: int, ranks: int) -> int:
    """The message size really measured (``S`` above) after rounding to whole elements."""
    n = elements_per_rank(collective, message_bytes, ranks) * FLOAT_BYTES
    return n * ranks if collective == "allgather" else n


def check_result(backend: Backend, collective: str, n_elems: int) -> bool:
    """Run the collective once on rank-dependent values, by the call the benchmark times
    (``Backend.prepared``), and check the result exactly."""
    r, n = backend.rank, backend.size
    buf = torch.full((n_elems,), float(r + 1), dtype=torch.float32)
    out = backend.prepared(collective, buf)()
    if collective == "allreduce":
        expected = torch.full((n_elems,), float(n * (n + 1) // 2), dtype=torch.float32)
    elif collective == "broadcast":
        expected = torch.full((n_elems,), 1.0, dtype=torch.float32)
    else:
        expected = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(n_elems)
    return bool(torch.equal(out.reshape(-1), expected))


def run_collective(backend: Backend, spec: dict[str, Any]) -> dict[str, Any]:
    """This rank's part of a collective benchmark: per-iteration times (s) after a barrier."""
    collective = str(spec["collective"])
    busbw_factor(collective, backend.size)  # validates the name
    n_elems = elements_per_rank(collective, int(spec["message_bytes"]), backend.size)
    # the timed buffer first, as a peer benchmark's first allocation: once the check's buffer of the
    # same size is freed, glibc serves the next one from its heap (its mmap threshold rises to the
    # freed size), and numpy's huge-page advice then finds no fresh mapping to apply to
    buf, allocation = allocate(str(spec.get("buffer", "engine")), backend.name, n_elems)
    correct = check_result(backend, collective, n_elems)
    run = backend.prepared(collective, buf)  # the engine's own call, its buffers held as a peer loop holds them
    times: list[float] = []
    warmup, iters = int(spec["warmup_steps"]), int(spec["steps"])
    for i in range(warmup + iters):
        backend.barrier()
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
        if collective == "allreduce" and i % 8 == 7:
            buf.fill_(1.0)  # keep the values finite (sums grow by a factor of n per call)
    return {
        "times_s": times,
        "correct": correct,
        "elements_per_rank": n_elems,
        "payload_bytes_per_rank": n_elems * FLOAT_BYTES,
        "allocation": allocation,
    }
