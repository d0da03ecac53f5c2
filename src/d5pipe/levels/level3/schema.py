"""Schema of the ``distributed`` section (level 3; see d5pipe.levels.level3). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from d5pipe.core.fields import at_least, choice, later, positive
from d5pipe.levels.declare import Builtin, declared
from d5pipe.levels.level2.early_stop import MODES as EARLY_STOP_MODES

BACKENDS: tuple[str, ...] = ("ddp", "horovod", "mpi")
SCALINGS: tuple[str, ...] = ("strong", "weak")
BENCHMARKS: tuple[str, ...] = ("train", "collective")
COLLECTIVES: tuple[str, ...] = ("allreduce", "broadcast", "allgather")
LAUNCHERS: tuple[str, ...] = ("auto", "torchrun", "mpirun", "srun")
BINDINGS: tuple[str, ...] = ("auto", "core", "none")
"""Rank placement (d5pipe.levels.level3.placement): each rank on cores of its own with its engine's
polling threads lowered, or left to the OS; ``auto``: ``core``."""
BUFFERS: tuple[str, ...] = ("engine", "peer")
"""A collective point's buffer: the engine's own tensor, or allocated as that engine's peer benchmarks
allocate theirs (d5pipe.levels.level3.placement.PEER_ALLOCATORS)."""
STRATEGIES: dict[str, Builtin] = declared(*(Builtin(name, f"{__package__}.{path}") for name, path in (
    ("allreduce", "strategies.AllReduce"), ("topk", "strategies.TopK"), ("local_sgd", "strategies.LocalSGD"),
    ("ring", "strategies.RingAverage"), ("dpsgd", "strategies.DPSGD"),
    ("ps_sync", "parameter_server.SyncParameterServer"), ("ps_async", "parameter_server.AsyncParameterServer"))))
"""The built-in strategies of ``distributed.strategy`` (d5pipe.levels.level3.strategies, .parameter_server)."""
FLOAT_BYTES = 4
"""Collective payloads are float32."""


@dataclass
class DistributedConf:
    backend: str = choice("ddp", BACKENDS)
    """``ddp`` (torch DDP, gloo/nccl), ``horovod`` (horovod.torch over MPI) or ``mpi`` (mpi4py)."""
    strategy: str = "allreduce"
    """How ranks exchange gradients or parameters each step: ``allreduce`` (the engine's synchronous
    gradient allreduce), ``topk`` (top-1% gradient compression), ``local_sgd`` (parameter averaging
    every 4 steps), ``ring`` (neighbour averaging after the step), ``dpsgd`` (neighbour mixing before it),
    ``ps_sync``/``ps_async`` (one parameter server on the last rank; asynchronous with staleness <= 2;
    mpi4py only) or a key of ``custom_strategies``."""
    custom_strategies: dict[str, Any] = field(default_factory=dict)
    """User strategies: name -> target (a d5pipe.levels.level3.strategies.Strategy)."""
    ranks: int = at_least(1, 1)
    """Processes taking part (data-parallel ranks)."""
    nodes: int = at_least(1, 1)
    """Nodes the ranks span (SLURM; ranks per node = ranks / nodes). 1: one node, or the whole
    allocation of ``executor.resources.level3.nodes``."""
    scaling: str = choice("strong", SCALINGS)
    """``strong``: global batch fixed (per-rank = global_batch / ranks); ``weak``: per-rank batch fixed."""
    global_batch: int = at_least(64, 1)
    """Global batch of strong scaling (must be divisible by ``ranks``)."""
    per_rank_batch: int = at_least(32, 1)
    """Per-rank batch of weak scaling."""
    steps: int = at_least(20, 1)
    """Timed iterations (training steps or collective calls)."""
    warmup_steps: int = at_least(3, 0)
    """Untimed iterations before them (training warm-up steps still train)."""
    benchmark: str = choice("train", BENCHMARKS)
    """``train`` (data-parallel training) or ``collective``."""
    collective: str = choice("allreduce", COLLECTIVES)
    """``allreduce``, ``broadcast`` or ``allgather`` (for ``benchmark: collective``)."""
    message_bytes: int = at_least(1024, FLOAT_BYTES)
    """Message size S as nccl-tests defines it (allgather: the gathered size)."""
    launcher: str = choice("auto", LAUNCHERS)
    """``auto`` (srun under the slurm executor, else torchrun for ddp, mpirun otherwise),
    ``torchrun``, ``mpirun`` or ``srun``."""
    oversubscribe: bool = True
    """Allow more ranks x threads than cores (flagged as metric ``oversubscribed``)."""
    threads_per_rank: int = at_least(0, 0)
    """torch threads of each rank. ``0``: the job's CPUs per task under srun, else the usable cores
    divided among the ranks (every point of a sweep then uses the whole machine). ``N``: N per rank
    whatever the rank count, so a scaling sweep adds N cores per rank."""
    timeout_s: float = positive(300.0)
    """Wall-clock limit of one launch; the launcher's process group is killed after it."""
    reuse_ranks: bool = True
    """Launch the ranks once per shard and run its points in them (d5pipe.levels.level3.session);
    false: one launch per point."""
    serial_check: bool = True
    """Compare the trained model with a 1-process run on the same global batches (``matches_serial``)."""
    tolerance: float = at_least(1e-4, 0.0)
    """Largest absolute parameter difference accepted by ``matches_serial``."""
    target_loss: Optional[float] = later(None)  # noqa: UP045
    """Training: the mean step loss over the ranks whose first crossing (at or below it, in a timed
    step) gives ``time_to_target_loss_s`` and ``steps_to_target_loss``; null: not measured."""
    early_stop: str = later("off", choices=EARLY_STOP_MODES)
    """Training: stop before ``steps``, judged after each timed step on the workers' mean loss (the
    value ``target_loss`` reads; a parameter server's servers are left out). ``target``: once it is at
    or below ``target_loss``; ``plateau``: once it has not fallen by more than ``early_stop_min_delta``
    below its best for ``early_stop_patience`` steps; ``either``: whichever first. Every rank stops
    after the same step (d5pipe.levels.level3.early_stop); the record says why, ``steps_run`` how many
    timed steps ran, and the serial comparison trains as many."""
    early_stop_patience: int = later(10, min=1)
    """``plateau``: timed steps without improvement of the workers' mean loss before stopping."""
    early_stop_min_delta: float = later(0.0, min=0.0)
    """``plateau``: the least decrease of the workers' mean loss that counts as an improvement."""
    bind: str = later("auto", choices=BINDINGS)
    """Rank placement under torchrun and mpirun. ``core`` pins local rank r to cores
    ``[r*t, (r+1)*t)`` of the usable ones (t = threads per rank), every thread of the process, and
    lowers the engine's polling threads (gloo's TCP loop, always runnable) to nice 19 so that they yield
    to the rank's own on a busy core; ``none`` leaves the ranks and their threads to the OS; ``auto`` is
    ``core`` (unbound on 2 cores a 1 MiB mpi4py allreduce read 130 us in some runs and 660-700 us, up to
    13 ms, in others; a 1 MiB gloo allreduce 0.5-3.2 ms, pinned with its poller lowered 0.32-0.35 ms).
    Ranks are left to the OS when ranks x threads exceed the cores (as Open MPI leaves oversubscribed
    ranks; gloo's poller is still lowered) and placed by SLURM under srun. Each point records how its
    ranks were placed, the CPUs each ran on and its engine's polling threads with their nice value
    (d5pipe.levels.level3.placement)."""
    buffer: str = later("engine", choices=BUFFERS)
    """Collective points: the buffer handed to the engine. ``engine``: a torch tensor
    (``torch.ones``), what training hands the engine; ``peer``: allocated as the engine's peer
    benchmarks allocate theirs (mpi4py: a numpy array, as OSU's OMB-Py; torch.distributed and
    Horovod: a torch tensor, the same as ``engine``). The allocation and its transparent huge
    pages are recorded with the point."""
    extra_args: list[str] = field(default_factory=list)
    """Extra launcher options, each one argument (never split, never passed to a shell)."""
