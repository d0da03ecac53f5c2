"""Where a collective runs: the cores of each rank and the pages of its buffer (issue 59).

**Cores.** With ``distributed.bind: core`` or ``auto`` the launch (:func:`d5pipe.levels.level3.launch.build_launch`)
sets ``D5PIPE_BIND=core`` in the ranks' environment under torchrun and mpirun, unless ranks x threads
exceed the usable cores (then the OS places the ranks, as Open MPI leaves oversubscribed ranks
unbound; srun's tasks are placed by SLURM). The worker, and anything launched the same way (the
bare loops of ``benchmarks/bare_collective.py``), calls :func:`bind_from_env` before its engine
starts: local rank ``r`` with ``t`` threads gets the cores ``sorted(usable)[r*t:(r+1)*t]`` (wrapping
round the usable set), pinned for every thread the process has, so the engine's own threads
(MPI, gloo, Horovod's background thread) inherit them. Unbound ranks on 2 cores made a 1 MiB allreduce
read 130 us in some runs and 660-700 us in others.
Every point records how its ranks were placed and the CPUs each ran on.

**Polling threads.** gloo's TCP transport runs a thread (``gloo_tcp_loop``) that calls ``epoll_wait``
in a loop and so is always runnable; next to a rank's own thread on a busy core it takes its time
slices, and the rank's thread waits for one (a 1 MiB allreduce on 2 ranks on 2 cores took either
~0.5 ms or ~3.8 ms per iteration, about half of each, so a launch's median landed on either:
0.5-3.2 ms over ten launches). So under ``bind: auto`` and ``core`` the launch sets
``D5PIPE_LOWER_POLLERS`` and, once its engine has started, a rank (and a bare loop launched the same
way) puts the engine's polling threads (:data:`POLLING_THREADS`) at nice :data:`POLLER_NICE`
(:func:`lower_pollers`): the poller still runs whenever a core is free, but yields to the rank's
threads on a busy one. Measured (bare gloo loop, 2 ranks on 2 cores, 200 iterations, three launches
each): unbound 0.57-3.5 ms, unbound with the poller lowered 0.48-0.49 ms, each rank pinned to a core
with the poller lowered 0.32-0.35 ms (16 MiB: 10.8-11.9 ms unbound, 5.3 ms pinned and lowered). So
``auto`` binds DDP's ranks too. Each rank records its engine's polling threads and their nice value
(:func:`polling_threads`); ``bind: none`` touches neither cores nor priorities.

**Buffers.** ``distributed.buffer: engine`` hands the engine a torch tensor (``torch.ones``), the way
training hands it gradients; ``peer`` allocates as the engine's peer benchmarks do
(:data:`PEER_ALLOCATORS`). They differ in more than the type: numpy advises the kernel to back
allocations of 4 MiB and more with transparent huge pages (``madvise(MADV_HUGEPAGE)``), torch's CPU
allocator does not (unless ``THP_MEM_ALLOC_ENABLE=1``), and on a machine whose THP mode is
``madvise`` a 16 MiB mpi4py allreduce was about 30% slower on the torch buffer. The record says which
allocator made the buffer and how many of its bytes sit on huge pages (:func:`huge_page_bytes`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

BIND_ENV = "D5PIPE_BIND"
"""Set to ``core`` by the launch when the ranks are to pin themselves."""
LOCAL_RANK_VARS: tuple[str, ...] = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMIX_RANK")
POLLERS_ENV = "D5PIPE_LOWER_POLLERS"
"""Set to ``1`` by the launch when the engine's polling threads are to yield to the rank's own."""
POLLING_THREADS: dict[str, tuple[str, ...]] = {"ddp": ("gloo_tcp_loop",)}
"""Per engine, the kernel names (``/proc/self/task/*/comm``) of the threads it starts that poll
without blocking: gloo's TCP device loop (torch.distributed's CPU backend; on CUDA it runs NCCL, and
its ranks look for none)."""
POLLER_WAIT_S = 2.0
"""How long :func:`lower_pollers` waits for an engine's polling threads to appear under their names."""
POLLER_NICE = 19
"""The nice value of a lowered polling thread: the lowest priority of the normal scheduling class."""
PAGE_BYTES = 4096
"""A buffer's record keeps its start's offset within a page: where the allocator served it from (a fresh
mapping starts a page plus the allocator's header; its heap, anywhere)."""
PEER_ALLOCATORS: dict[str, str] = {"mpi": "numpy.ones", "ddp": "torch.ones", "horovod": "torch.ones"}
"""How each engine's peer benchmarks allocate a collective's buffer: OSU's Python benchmarks (OMB-Py)
and mpi4py's demos use numpy arrays; torch.distributed's and Horovod's benchmarks use torch tensors."""


def rank_cpus(usable: Sequence[int], local_rank: int, threads: int) -> list[int]:
    """The cores of local rank ``local_rank`` with ``threads`` threads: the next ``threads`` of
    ``usable`` (sorted) after those of the ranks before it, wrapping round."""
    cores = sorted(usable)
    if not cores:
        raise ValueError("no usable cores")
    t = max(1, threads)
    return sorted({cores[(local_rank * t + i) % len(cores)] for i in range(t)})


def pin_process(cpus: Sequence[int]) -> None:
    """Pin every thread of this process to ``cpus`` (threads started later inherit the mask)."""
    for tid in [tid for tid, _ in _threads()] or [0]:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def local_rank_from_env(env: Mapping[str, str]) -> int:
    """This rank's index on its node, from torchrun's, Open MPI's, SLURM's or PMIx's variables."""
    for name in LOCAL_RANK_VARS:
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def bind_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Pin this rank as the launch asked (``D5PIPE_BIND``); returns what was done, for the record."""
    env = os.environ if env is None else env
    if env.get(BIND_ENV) != "core":
        return {"bind": "none", "cpus": sorted(os.sched_getaffinity(0))}
    threads = int(env["OMP_NUM_THREADS"]) if env.get("OMP_NUM_THREADS", "").isdigit() else 1
    cpus = rank_cpus(sorted(os.sched_getaffinity(0)), local_rank_from_env(env), threads)
    pin_process(cpus)
    return {"bind": "core", "cpus": cpus}


def _threads() -> list[tuple[int, str]]:
    """(thread ID, kernel name) of every thread of this process."""
    tasks, found = Path("/proc/self/task"), []
    for tid in os.listdir(tasks) if tasks.is_dir() else []:
        try:
            found.append((int(tid), (tasks / tid / "comm").read_text(encoding="utf-8").strip()))
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def _pollers(engine: str) -> list[tuple[int, str]]:
    """(thread ID, kernel name) of this process's threads of ``engine`` that poll (:data:`POLLING_THREADS`)."""
    names = POLLING_THREADS.get(engine, ())
    return [(tid, name) for tid, name in _threads() if name in names]


def polling_threads(engine: str) -> list[dict[str, Any]]:
    """This process's threads of ``engine`` that poll and their nice value."""
    found = []
    for tid, name in _pollers(engine):
        with contextlib.suppress(ProcessLookupError):
            found.append({"name": name, "nice": os.getpriority(os.PRIO_PROCESS, tid)})
    return found


def lower_pollers(engine: str, env: Mapping[str, str] | None = None,
                  wait_s: float = POLLER_WAIT_S) -> list[dict[str, Any]]:
    """Once ``engine`` has started its threads: wait up to ``wait_s`` for its polling threads to carry
    their names (a thread names itself once it runs: gloo's, just after the process group is up, may
    not have yet); where the launch asked (:data:`POLLERS_ENV`), put them at nice
    :data:`POLLER_NICE`; then :func:`polling_threads`, for the record."""
    env = os.environ if env is None else env
    deadline = time.monotonic() + wait_s
    while POLLING_THREADS.get(engine) and not _pollers(engine) and time.monotonic() < deadline:
        time.sleep(0.005)
    if env.get(POLLERS_ENV) == "1":
        for tid, _ in _pollers(engine):
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, tid, POLLER_NICE)
    return polling_threads(engine)


def huge_page_bytes(address: int, nbytes: int) -> int | None:
    """Bytes of transparent huge pages in the mappings that hold ``[address, address + nbytes)``
    (``AnonHugePages`` of ``/proc/self/smaps``); None where there is no smaps to read."""
    try:
        text = Path("/proc/self/smaps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    total, inside = 0, False
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):  # a mapping's first line: "lo-hi perms ..."
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo < address + nbytes and address < hi
        elif inside and line.startswith("AnonHugePages:"):
            total += int(line.split()[1]) * 1024
    return total


def allocate(buffer: str, engine: str, n_elems: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """A float32 buffer of ones for a collective (``buffer``: ``engine`` or ``peer``) and its record."""
    import torch  # here: a bare loop that only binds (benchmarks/bare_collective.py) imports no torch

    allocator = PEER_ALLOCATORS.get(engine, "torch.ones") if buffer == "peer" else "torch.ones"
    if allocator == "numpy.ones":
        tensor = torch.from_numpy(np.ones(n_elems, dtype=np.float32))  # shares numpy's memory
    else:
        tensor = torch.ones(n_elems, dtype=torch.float32)
    nbytes = tensor.numel() * tensor.element_size()
    return tensor, {"buffer": buffer, "allocator": allocator, "bytes": nbytes,
                    "huge_page_bytes": huge_page_bytes(tensor.data_ptr(), nbytes),
                    "page_offset": tensor.data_ptr() % PAGE_BYTES}
