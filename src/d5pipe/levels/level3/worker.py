"""Per-rank entry point: ``python -m d5pipe.levels.level3.worker SPEC.json``.

The spec (written by ``run_point``) says what to run; the rank and world size come from the
launcher's environment (torchrun, Open MPI, PMIx or SLURM). Each rank writes
``<out_dir>/rank<r>.json`` atomically; rank 0 of a training run also writes its final parameters
to ``<out_dir>/params_rank0.pt`` for the comparison with the serial reference.

Per-step timing: a barrier (unless the strategy is asynchronous: ``Strategy.lockstep``), then
``perf_counter`` around the step (for CUDA the device is
synchronised before the clock is read). Each rank also records its time at that barrier and inside
the collectives it counts (d5pipe.levels.level3.counting), from which the parent splits its steps
into compute, communication and waiting (d5pipe.levels.level3.rank_split). Per-rank times are
combined (max over ranks per step) by the parent, not here, so no collective runs inside a timed
region.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.core.atomic import write_json
from d5pipe.core.fields import conf_from_dict
from d5pipe.levels.device import synchronize
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level3 import early_stop, training
from d5pipe.levels.level3.backends import Backend, make_backend, rank_from_env
from d5pipe.levels.level3.collectives import run_collective
from d5pipe.levels.level3.placement import BIND_ENV, bind_from_env, lower_pollers, polling_threads
from d5pipe.levels.level3.shard_check import save_samples
from d5pipe.levels.level3.strategies import Communicator
from d5pipe.levels.optim import make_optimizer
from d5pipe.levels.training_log import facts
from d5pipe.measure import energy
from d5pipe.measure.mllog import TrainingLog
from d5pipe.measure.process import boot_id, die_with_parent


def _start(spec: dict[str, Any]) -> tuple[Backend, torch.device]:
    """This rank's threads, device and engine, from the first spec it runs."""
    torch.set_num_threads(int(spec["threads_per_rank"]))
    _, _, local_rank = rank_from_env()
    cuda = str(spec["device"]).startswith("cuda")
    device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count())) if cuda else torch.device("cpu")
    backend = make_backend(str(spec["backend"]), device, float(spec["timeout_s"]))
    if device.type == "cpu":  # on CUDA, DDP runs NCCL: no gloo poller competes for the rank's cores
        lower_pollers(backend.name)  # the engine's threads have started: its pollers yield where asked
    return backend, device


@functools.lru_cache(maxsize=4)
def _load_data(path: str) -> Any:
    """A prepared dataset, loaded once per rank process (the points of a session share it)."""
    from d5pipe.levels.datasets import load

    return load(Path(path))


def _energy_span(device: torch.device) -> tuple[energy.Span | None, int]:
    """(this rank's energy span, its local rank): RAPL counts a whole host, so only a host's local
    rank 0 reads it; on CUDA each rank reads its own GPU (NVML)."""
    _, _, local_rank = rank_from_env()
    if device.type == "cuda":
        return energy.Span(energy.meter(f"cuda:{device.index or 0}")), local_rank
    return (energy.Span(energy.meter("cpu")) if local_rank == 0 else None), local_rank


def _mllog(spec: dict[str, Any], rank: int, n_train: int, n_test: int, ranks: int) -> TrainingLog:
    """Rank 0's MLPerf log when the point asks for one (``spec["mllog"]``), else a silent one."""
    asked = spec.get("mllog")
    if not asked or rank != 0:
        return TrainingLog(None, {})
    log = TrainingLog(Path(asked["path"]), asked["section"])
    conf = conf_from_dict(TrainConf, "train", spec["train"])
    log.start(facts(str(spec["experiment"]), int(spec["training_seed"]["seed"]), conf, int(spec["global_batch"]),
                    n_train, n_test, ranks))
    return log


def run_training(backend: Backend, spec: dict[str, Any], device: torch.device, out_dir: Path) -> dict[str, Any]:
    """Train ``warmup_steps + steps`` steps on this rank's shards; the timed steps follow warm-up.
    ``distributed.early_stop`` may end them sooner, on every rank after the same step
    (d5pipe.levels.level3.early_stop)."""
    from d5pipe.levels.datasets import require_materialised

    data = _load_data(str(spec["data_path"]))
    x_train, y_train, _, y_test = require_materialised(data, "level 3 training")  # level3.point skips earlier
    x, y = x_train.to(device), y_train.to(device)
    rank, size = backend.rank, backend.size
    mllog = _mllog(spec, rank, len(y_train), len(y_test), size)
    model = training.build_model(spec["model"], data.input_shape, data.n_classes, int(spec["rank_seeds"][rank]))
    model = model.to(device)
    opt = make_optimizer(spec["train"], model.parameters())
    strategy = training.build_strategy(spec)
    comm = Communicator(backend)
    step = strategy.make_step(model, opt, training.loss_fn(), comm)
    backend.counter.reset()  # parameter broadcast at set-up is not per-step traffic
    warmup, steps = int(spec["warmup_steps"]), int(spec["steps"])
    stop = early_stop.from_spec(spec)
    worker = strategy.role(rank, size) == "worker"
    span, local_rank = _energy_span(device)
    times: list[float] = []
    step_bytes: list[int] = []
    step_calls: list[int] = []
    losses: list[float] = []
    barrier_s: list[float] = []  # at the lockstep barrier, and inside counted collectives (level3.rank_split)
    collective_s: list[float] = []
    batches = training.global_batches(len(y), int(spec["global_batch"]), warmup + steps, int(spec["data_seed"]))
    used: list[np.ndarray] = []
    mllog.begin_run()
    mllog.block(True, 0)
    for i, idx in enumerate(batches):
        share = strategy.share(idx, rank, size)
        used.append(share)
        local = torch.from_numpy(share).to(device)
        xb, yb = x[local], y[local]
        tb = time.perf_counter()
        if strategy.lockstep:
            backend.barrier()
        synchronize(device)
        metered = span if i >= warmup else None  # the timed steps' energy, read off the clock
        if metered is not None:
            metered.begin()
        t0 = time.perf_counter()
        loss = step(xb, yb)
        synchronize(device)
        t1 = time.perf_counter()
        inside = backend.counter.seconds_inside()
        if metered is not None:
            metered.end()
        nbytes, ncalls = backend.counter.reset()
        losses.append(loss)
        if i >= warmup:
            times.append(t1 - t0)
            step_bytes.append(nbytes)
            step_calls.append(ncalls)
            barrier_s.append(t0 - tb)
            collective_s.append(inside)
            if stop.mode != "off":  # every rank decides on the same shared number, off the clock
                mean = early_stop.shared_mean_loss(backend, loss, worker, device)
                backend.counter.reset()  # the decision's exchange is not the step's traffic
                if stop.after(len(times), mean, mean):
                    break
    ran = len(times)
    mllog.block(False, (warmup + ran) * int(spec["global_batch"]))
    mllog.close()  # the point adds its evaluation and run_stop (d5pipe.levels.level3.point)
    strategy.finish(model, comm)  # untimed, uncounted
    backend.counter.reset()
    save_samples(out_dir, rank, used)
    if rank == 0:
        torch.save(training.flat_params(model), out_dir / "params_rank0.pt")
    profiled = _profiled_steps(backend, spec, model, xb, yb, device) if spec.get("profile") and used else None
    return {
        "profile": profiled,
        "times_s": times,
        "comm_bytes_per_step": step_bytes,
        "comm_calls_per_step": step_calls,
        "barrier_s": barrier_s,
        "collective_s": collective_s,
        "losses": losses,
        "params_sha256": training.params_sha256(model),
        "gradient_bytes": training.gradient_bytes(model),
        "n_params": sum(p.numel() for p in model.parameters()),
        "per_rank_batch": len(used[-1]) if used else 0,  # a worker's share (a server draws none)
        "strategy": training.strategy_info(strategy, model, size, range(warmup, warmup + ran), backend.name),
        "role": strategy.role(rank, size),
        "observed": strategy.observed(),
        "steps_run": ran,
        "local_rank": local_rank,
        "energy": None if span is None else span.record(ran),
        "stopped": stop.record(ran, steps),
    }


def _profiled_steps(backend: Backend, spec: dict[str, Any], model: torch.nn.Module, xb: torch.Tensor,
                    yb: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """This rank's profiled pass (d5pipe.measure.profile), after its timed steps, every rank
    together: steps of the strategy on the last batch, run by a twin of the trained model with an
    optimizer and a strategy of its own, so the trained weights, the recorded metrics and the
    serial check are untouched. The collectives d5pipe counts show as ``d5pipe:collective``."""
    import copy

    from d5pipe.measure.profile import profile_calls

    twin = copy.deepcopy(model)
    strategy = training.build_strategy(spec)
    comm = Communicator(backend)
    step = strategy.make_step(twin, make_optimizer(spec["train"], twin.parameters()), training.loss_fn(), comm)
    trace = Path(str(spec["profile"]["trace"]).format(rank=backend.rank))
    out = profile_calls(lambda: step(xb, yb), int(spec["profile"]["iterations"]), trace,
                        cuda=device.type == "cuda", sync=lambda: synchronize(device), phase="train_step")
    strategy.finish(twin, comm)
    backend.counter.reset()
    return {**out, "rank": backend.rank}


def run_spec(backend: Backend, spec: dict[str, Any], device: torch.device) -> None:
    """Run one point's spec on this rank and write ``<out_dir>/rank<r>.json``."""
    out_dir = Path(spec["out_dir"])
    torch.set_num_threads(int(spec["threads_per_rank"]))
    if backend.size != int(spec["ranks"]):
        raise RuntimeError(f"launcher started {backend.size} ranks, spec asks for {spec['ranks']}")
    started = time.time()
    if spec["benchmark"] == "collective":
        result = run_collective(backend, spec)
    else:
        result = run_training(backend, spec, device, out_dir)
    backend.barrier()
    result.update(
        rank=backend.rank,
        size=backend.size,
        backend=backend.name,
        experiment=spec["experiment"],
        hostname=socket.gethostname(),
        boot_id=boot_id(),
        cpus=sorted(os.sched_getaffinity(0)),
        bind=os.environ.get(BIND_ENV, "none"),
        polling_threads=polling_threads(backend.name),
        pid=os.getpid(),
        threads=torch.get_num_threads(),
        wall_s=time.time() - started,
    )
    write_json(out_dir / f"rank{backend.rank}.json", result)


def _next_spec(session: Path, index: int) -> dict[str, Any] | None:
    """Wait for ``point-<index>.json`` (None once ``stop`` appears)."""
    path, stop = session / f"point-{index}.json", session / "stop"
    delay = 0.001
    while not path.exists():
        if stop.exists():
            return None
        time.sleep(delay)
        delay = min(0.02, delay * 2)
    return json.loads(path.read_text(encoding="utf-8"))


def run_session(session: Path) -> int:
    """Run point after point (d5pipe.levels.level3.session); the process group is set up once."""
    first = _next_spec(session, 0)
    if first is None:
        return 0
    backend, device = _start(first)
    if backend.rank == 0:  # the process group is up: the launch is over (the session times it)
        write_json(session / "ready.json", {"rank": 0, "pid": os.getpid()})
    index = 0
    spec: dict[str, Any] | None = first
    while spec is not None:
        try:
            run_spec(backend, spec, device)
        except Exception as exc:  # this point fails; the next one may still run
            write_json(Path(spec["out_dir"]) / f"rank{backend.rank}.error.json", {
                "rank": backend.rank, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()})
        index += 1
        spec = _next_spec(session, index)
    backend.finalize()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``worker SPEC.json`` runs one point; ``worker --session DIR`` runs a session's points."""
    args = sys.argv[1:] if argv is None else argv
    die_with_parent()  # a rank never outlives its launcher
    if os.getppid() == 1:
        # the launcher was killed before that, while this rank was still importing: the kernel sends no
        # signal then, and the rank is init's (its parent is always a launcher: mpirun, torchrun or
        # slurmstepd; under a subreaper this is not seen)
        return 0
    bind_from_env()  # on the cores the launch gave this rank, before the engine starts its threads
    if len(args) == 2 and args[0] == "--session":
        return run_session(Path(args[1]))
    if len(args) != 1:
        print("usage: python -m d5pipe.levels.level3.worker SPEC.json | --session DIR", file=sys.stderr)
        return 2
    spec: dict[str, Any] = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    backend, device = _start(spec)
    run_spec(backend, spec, device)
    backend.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
