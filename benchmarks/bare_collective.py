"""A bare allreduce loop in one engine, timed as OSU micro-benchmarks and nccl-tests time it.

One rank of ``benchmarks/bench_collectives_peer.py``'s peer side, launched exactly as d5pipe launches
its ranks (d5pipe.levels.level3.launch.build_launch with ``module="benchmarks.bare_collective"``:
the same launcher, environment, threads and placement). Per iteration: a barrier, then this rank
times its own in-place allreduce (sum) with ``perf_counter``; the buffer is allocated as the
engine's peer benchmarks allocate it (mpi4py: a numpy array, as OSU's OMB-Py; torch.distributed
over gloo and Horovod: a torch tensor) and refilled with ones every 8 iterations, untimed (the sums
grow by a factor of n per call). Each rank writes its times to ``OUT_DIR/rank<r>.json``; the parent
takes the maximum over ranks per iteration and the median over iterations.

Usage (by the benchmark): ``python -m benchmarks.bare_collective ENGINE MESSAGE_BYTES WARMUP ITERS OUT_DIR
[peer|engine]`` (the allocation; ``engine``: mpi4py on a torch tensor's memory, as d5pipe's engine buffer).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.level3.placement import PAGE_BYTES, bind_from_env, huge_page_bytes, lower_pollers, polling_threads

RESET_EVERY = 8


Loop = tuple[int, Callable[[], Any], Callable[[], Any], Any, str, Callable[[], Any]]


def engine_loop(engine: str, n_elems: int, allocation: str = "peer") -> Loop:
    """``(rank, barrier, allreduce, buffer, allocator, finish)`` of ``engine``, set up as its users do;
    ``allocation`` ``engine``: mpi4py's buffer is a torch tensor's memory (``torch.ones(n).numpy()``,
    as d5pipe's ``distributed.buffer: engine`` hands it), not a numpy array of its own."""
    if engine == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if allocation == "engine":
            import torch

            owner = torch.ones(n_elems, dtype=torch.float32)
            arr, allocator = owner.numpy(), "torch.ones"  # a view: the tensor's memory
        else:
            arr, allocator = np.ones(n_elems, dtype=np.float32), "numpy.ones"
        return (comm.Get_rank(), comm.Barrier,
                lambda: comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM), arr, allocator, lambda: None)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    tensor = torch.ones(n_elems, dtype=torch.float32)
    if engine == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://", rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
        lower_pollers("ddp")  # as d5pipe's ranks do once the engine has started, where the launch asked
        return (dist.get_rank(), lambda: dist.barrier(), lambda: dist.all_reduce(tensor), tensor, "torch.ones",
                dist.destroy_process_group)
    if engine == "horovod":
        import horovod.torch as hvd

        hvd.init()
        return (int(hvd.rank()), hvd.barrier, lambda: hvd.allreduce_(tensor, op=hvd.Sum), tensor, "torch.ones",
                hvd.shutdown)
    raise SystemExit(f"unknown engine {engine!r}")


def main(argv: list[str]) -> int:
    engine, message_bytes, warmup, iters, out_dir = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4])
    allocation = argv[5] if len(argv) > 5 else "peer"
    placed = bind_from_env()  # the placement d5pipe's ranks get
    rank, barrier, allreduce, buf, allocator, finish = engine_loop(engine, message_bytes // 4, allocation)
    times: list[float] = []
    for i in range(warmup + iters):
        barrier()
        t0 = time.perf_counter()
        allreduce()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
        if i % RESET_EVERY == RESET_EVERY - 1:
            buf.fill(1.0) if isinstance(buf, np.ndarray) else buf.fill_(1.0)
    address = buf.ctypes.data if isinstance(buf, np.ndarray) else buf.data_ptr()
    record = {"rank": rank, "times_s": times, "cpus": sorted(os.sched_getaffinity(0)), "bind": placed["bind"],
              "polling_threads": polling_threads(engine), "page_offset": address % PAGE_BYTES,
              "allocator": allocator, "huge_page_bytes": huge_page_bytes(address, (message_bytes // 4) * 4)}
    barrier()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
