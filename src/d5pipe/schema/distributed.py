"""Schema of the ``distributed`` section (level 3; see d5pipe.distributed)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DistributedConf:
    backend: str = "ddp"
    """``ddp`` (torch DDP, gloo/nccl), ``horovod`` (horovod.torch over MPI) or ``mpi`` (mpi4py)."""
    ranks: int = 1
    scaling: str = "strong"
    """``strong``: global batch fixed (per-rank = global_batch / ranks); ``weak``: per-rank batch fixed."""
    global_batch: int = 64
    """Global batch of strong scaling (must be divisible by ``ranks``)."""
    per_rank_batch: int = 32
    """Per-rank batch of weak scaling."""
    steps: int = 20
    """Timed iterations (training steps or collective calls)."""
    warmup_steps: int = 3
    """Untimed iterations before them (training warm-up steps still train)."""
    benchmark: str = "train"
    """``train`` (data-parallel training) or ``collective``."""
    collective: str = "allreduce"
    """``allreduce``, ``broadcast`` or ``allgather`` (for ``benchmark: collective``)."""
    message_bytes: int = 1024
    """Message size S as nccl-tests defines it (allgather: the gathered size)."""
    launcher: str = "auto"
    """``auto`` (srun under the slurm executor, else torchrun for ddp, mpirun otherwise),
    ``torchrun``, ``mpirun`` or ``srun``."""
    oversubscribe: bool = True
    """Allow more ranks x threads than cores (flagged as metric ``oversubscribed``)."""
    threads_per_rank: int = 0
    """torch threads of each rank. ``0``: the job's CPUs per task under srun, else the usable cores
    divided among the ranks (every point of a sweep then uses the whole machine). ``N``: N per rank
    whatever the rank count, so a scaling sweep adds N cores per rank."""
    timeout_s: float = 300.0
    """Wall-clock limit of one launch; the launcher's process group is killed after it."""
    serial_check: bool = True
    """Compare the trained model with a 1-process run on the same global batches (``matches_serial``)."""
    tolerance: float = 1e-4
    """Largest absolute parameter difference accepted by ``matches_serial``."""
    extra_args: list[str] = field(default_factory=list)
    """Extra launcher options, each one argument (never split, never passed to a shell)."""
