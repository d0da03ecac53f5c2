"""Launch commands for the rank workers: torchrun, mpirun (Open MPI) and srun (SLURM).

Every command is an argument list, never a shell string. The per-point spec travels as the path of
a JSON file (the last argument), so no config value is ever interpolated into a command line; a
value such as ``x; touch owned`` reaches the workers as data.

Rendezvous is loopback only for local launches: ``MASTER_ADDR=127.0.0.1`` and a free port picked
here. DDP is launched with ``torchrun`` by default (its static rendezvous on that address/port);
Horovod and the mpi4py backend need an MPI launcher (``mpirun``, or ``srun`` under SLURM). DDP under
``mpirun``/``srun`` is supported too: the worker then reads its rank from the MPI/SLURM environment
and joins the gloo group through ``env://`` on the same address/port.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import run_tool
from d5pipe.levels.level3.placement import BIND_ENV, POLLER_NICE, POLLERS_ENV, POLLING_THREADS
from d5pipe.levels.level3.schema import BACKENDS, BINDINGS, LAUNCHERS

LOOPBACK = "127.0.0.1"
WORKER_MODULE = "d5pipe.levels.level3.worker"


@dataclass(frozen=True)
class LaunchPlan:
    """What to execute for one point: the argument list and the environment to add."""

    launcher: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1
    oversubscribed: bool = False
    threads_per_rank: int = 1
    binding: str = "none"
    """How the ranks are placed: ``core`` (each pins itself to cores of its own,
    d5pipe.levels.level3.placement), ``none`` (left to the OS; with why when bind=core was asked)
    or ``srun`` (SLURM places the tasks); followed by ``(polling threads at nice 19)`` where the ranks
    lower their engine's polling threads."""


def usable_cores() -> int:
    """CPU cores this process may run on (affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on ``host`` a moment ago (bound with port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def choose_launcher(backend: str, launcher: str, executor_name: str) -> str:
    """The launcher for a point: explicit ``distributed.launcher``, else srun under SLURM, else
    torchrun for DDP and mpirun for the MPI-based backends."""
    if backend not in BACKENDS:
        raise D5PipeError(f"distributed.backend: unknown value {backend!r}; known: {list(BACKENDS)}")
    if launcher not in LAUNCHERS:
        raise D5PipeError(f"distributed.launcher: unknown value {launcher!r}; known: {list(LAUNCHERS)}")
    if launcher == "auto":
        if executor_name == "slurm":
            return "srun"
        return "torchrun" if backend == "ddp" else "mpirun"
    if launcher == "torchrun" and backend != "ddp":
        raise D5PipeError(
            f"distributed.launcher: torchrun cannot start backend {backend!r} "
            "(it needs MPI ranks); use mpirun or srun"
        )
    return launcher


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def find_program(name: str) -> str:
    """``name`` from the running interpreter's bin directory (the venv's MPI), else from PATH."""
    local = _venv_bin() / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise D5PipeError(f"launcher program {name!r} not found next to {sys.executable} or on PATH")
    return found


def base_env(ranks: int, threads_per_rank: int, port: int, master_addr: str) -> dict[str, str]:
    """Environment added for every launcher (rendezvous address, thread counts, loopback NICs)."""
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": str(threads_per_rank),
        "MKL_NUM_THREADS": str(threads_per_rank),
        "D5PIPE_WORLD_SIZE": str(ranks),
        "PYTHONUNBUFFERED": "1",
    }
    # Local runs keep gloo and MPI's TCP data path on loopback. (PRRTE's out-of-band channel refuses
    # a loopback-only interface list, so it is left to choose; it only carries control messages.)
    if master_addr == LOOPBACK:
        env["GLOO_SOCKET_IFNAME"] = "lo"
        env["OMPI_MCA_btl_tcp_if_include"] = "lo"
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root unless told
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # ranks must import the same d5pipe and MPI as this process
    env["PATH"] = f"{_venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}"
    for name in ("D5PIPE_ALLOW", "PYTHONPATH"):  # the allow-list and plug-in import path of the person running d5pipe
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def slurm_cpus_per_task() -> int | None:
    """``SLURM_CPUS_PER_TASK`` of the enclosing job (None outside one or when it is not set)."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def job_nodelist() -> str:
    """The node list of the enclosing SLURM job: ``SLURM_JOB_NODELIST``, else asked of squeue
    (snakemake-executor-plugin-slurm removes most ``SLURM_*`` variables from its job steps but
    keeps ``SLURM_JOB_ID``)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
    out = run_tool(["squeue", "-h", "-j", job_id, "-o", "%N"], 30) if not nodelist and job_id else None
    return out.stdout.strip().splitlines()[0] if out is not None and out.stdout.strip() else nodelist


def slurm_master_addr(nodelist: str) -> str:
    """The first host of a SLURM node list (``scontrol show hostnames``), for multi-node DDP."""
    out = run_tool(["scontrol", "show", "hostnames", nodelist], 60)
    if out is None:
        raise D5PipeError("executor slurm: scontrol not found; cannot resolve SLURM_JOB_NODELIST")
    out.check_returncode()
    hosts = out.stdout.split()
    if not hosts:
        raise D5PipeError(f"executor slurm: SLURM_JOB_NODELIST={nodelist!r} names no host")
    return hosts[0]


def build_launch(
    *,
    backend: str,
    ranks: int,
    spec_path: Path,
    launcher: str = "auto",
    executor_name: str = "local",
    oversubscribe: bool = True,
    threads_per_rank: int = 0,
    extra_args: list[str] | None = None,
    cores: int | None = None,
    port: int | None = None,
    slurm_nodes: int = 1,
    master_addr: str = LOOPBACK,
    worker_args: list[str] | None = None,
    bind: str = "auto",
    module: str = WORKER_MODULE,
) -> LaunchPlan:
    """The argument list and environment that start ``ranks`` workers on ``spec_path``.

    ``worker_args`` replace ``[spec_path]`` as the worker's arguments (``["--session", DIR]``
    starts ranks that run point after point, d5pipe.levels.level3.session). ``slurm_nodes`` is
    the number of nodes srun spreads the ranks over (``--ntasks-per-node`` = ranks / nodes).

    ``bind`` is ``distributed.bind``: ``core`` and ``auto`` ask the ranks to pin themselves
    (``D5PIPE_BIND=core``) under torchrun and mpirun when ranks x threads fit the cores, and to lower
    their engine's polling threads (``D5PIPE_LOWER_POLLERS=1``, d5pipe.levels.level3.placement). ``module`` is what each rank runs
    (``python -m MODULE ARGS``; the benchmarks launch their bare loops the same way).

    ``extra_args`` are appended to the launcher's own options (each one argument, never split).
    ``threads_per_rank`` 0 picks the threads (see :class:`d5pipe.levels.level3.schema.DistributedConf`).
    More ranks x threads than cores is allowed only with ``oversubscribe`` and is flagged in the plan
    (under srun SLURM places the ranks and nothing is flagged).
    """
    if ranks < 1:
        raise D5PipeError(f"distributed.ranks: must be >= 1, got {ranks}")
    chosen = choose_launcher(backend, launcher, executor_name)
    if chosen == "srun" and slurm_nodes > 1 and master_addr == LOOPBACK:
        master_addr = slurm_master_addr(job_nodelist())
    n_cores = usable_cores() if cores is None else cores
    # under srun one rank per task, each with the job's CPUs per task: srun (>= 22.05) does not inherit
    # the allocation's --cpus-per-task, so it is passed on explicitly
    job_cpus = slurm_cpus_per_task() if chosen == "srun" else None
    threads = threads_per_rank if threads_per_rank > 0 else job_cpus or max(1, n_cores // ranks)
    oversubscribed = ranks * threads > n_cores and chosen != "srun"
    if oversubscribed and not oversubscribe:
        raise D5PipeError(
            f"distributed.ranks: {ranks} ranks x {threads} threads on {n_cores} cores needs "
            "distributed.oversubscribe=true"
        )
    if bind not in BINDINGS:
        raise D5PipeError(f"distributed.bind: unknown value {bind!r}; known: {list(BINDINGS)}")
    the_port = free_port() if port is None else port
    env = base_env(ranks, threads, the_port, master_addr)
    binding = "none"
    if chosen == "srun":
        binding = "srun"
    elif bind != "none" and oversubscribed:
        binding = f"none (oversubscribed: {ranks} ranks x {threads} threads on {n_cores} cores)"
    elif bind != "none":  # auto and core: unbound ranks poll and collide (d5pipe.levels.level3.placement)
        binding = "core"
        env[BIND_ENV] = "core"
    if bind != "none" and POLLING_THREADS.get(backend):  # gloo's poller yields to the ranks' threads
        env[POLLERS_ENV] = "1"
        binding += f" (polling threads at nice {POLLER_NICE})"
    extras = [str(a) for a in (extra_args or [])]
    args = [str(a) for a in worker_args] if worker_args is not None else [str(spec_path)]
    worker = [sys.executable, "-m", module, *args]
    argv: list[str]
    if chosen == "torchrun":
        argv = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes=1", f"--nproc-per-node={ranks}",
            f"--master-addr={master_addr}", f"--master-port={the_port}",
            "--max-restarts=0", *extras,
            "--module", module, *args,
        ]
    elif chosen == "mpirun":
        argv = [find_program("mpirun"), "-n", str(ranks), "--bind-to", "none"]
        if oversubscribed:
            argv.append("--oversubscribe")
        exported = [*(name for name in sorted(env) if name != "PATH"), "PATH"]  # every variable, PATH last
        argv += [*(arg for name in exported for arg in ("-x", name)), *extras, *worker]
    else:  # srun
        argv = [
            "srun", f"--ntasks={ranks}", f"--nodes={slurm_nodes}", f"--cpus-per-task={threads}",
            "--kill-on-bad-exit=1", "--export=ALL",
        ]
        if slurm_nodes > 1 and ranks % slurm_nodes == 0:
            argv.append(f"--ntasks-per-node={ranks // slurm_nodes}")
        if backend in ("horovod", "mpi"):
            argv.append("--mpi=pmix")  # Open MPI 5 ranks wire up through PMIx under SLURM
        argv += [*extras, *worker]
    return LaunchPlan(chosen, argv, env, ranks, oversubscribed, threads, binding)
