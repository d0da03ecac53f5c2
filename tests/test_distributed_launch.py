"""Launch argument lists: torchrun, mpirun, srun; launcher choice; oversubscription; hostile values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.levels.level3.launch import LOOPBACK, build_launch, choose_launcher

HOSTILE = "x; touch owned"


def _spec(tmp_path: Path) -> Path:
    return tmp_path / HOSTILE / "spec.json"


def test_launcher_choice() -> None:
    assert choose_launcher("ddp", "auto", "local") == "torchrun"
    assert choose_launcher("horovod", "auto", "local") == "mpirun"
    assert choose_launcher("mpi", "auto", "local") == "mpirun"
    assert choose_launcher("ddp", "auto", "slurm") == "srun"
    assert choose_launcher("ddp", "mpirun", "local") == "mpirun"
    with pytest.raises(D5PipeError, match="distributed.launcher"):
        choose_launcher("mpi", "torchrun", "local")
    with pytest.raises(D5PipeError, match="distributed.backend"):
        choose_launcher("nccl2", "auto", "local")


def test_torchrun_argv_is_a_list_with_the_spec_path_as_one_argument(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    plan = build_launch(backend="ddp", ranks=2, spec_path=spec, cores=2, port=29511,
                        extra_args=[HOSTILE])
    assert plan.launcher == "torchrun" and all(isinstance(a, str) for a in plan.argv)
    assert plan.argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in plan.argv
    assert f"--master-addr={LOOPBACK}" in plan.argv and "--master-port=29511" in plan.argv
    assert plan.argv[-1] == str(spec)  # the hostile directory name stays one argument
    assert HOSTILE in plan.argv  # an extra argument is passed as one element, never split
    assert plan.env["MASTER_ADDR"] == LOOPBACK and plan.env["MASTER_PORT"] == "29511"
    assert not plan.oversubscribed and plan.threads_per_rank == 1


def test_mpirun_argv_oversubscribes_when_ranks_exceed_cores(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    plan = build_launch(backend="horovod", ranks=4, spec_path=spec, cores=2, port=29512)
    assert plan.launcher == "mpirun" and Path(plan.argv[0]).name == "mpirun"
    assert plan.argv[1:3] == ["-n", "4"]
    assert "--oversubscribe" in plan.argv and plan.oversubscribed
    assert plan.argv[-4:] == [sys.executable, "-m", "d5pipe.levels.level3.worker", str(spec)]
    forwarded = {plan.argv[i + 1] for i, a in enumerate(plan.argv) if a == "-x"}
    assert {"MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "PATH"} <= forwarded
    fits = build_launch(backend="mpi", ranks=2, spec_path=spec, cores=2, port=29512)
    assert "--oversubscribe" not in fits.argv and not fits.oversubscribed
    with pytest.raises(D5PipeError, match="oversubscribe"):
        build_launch(backend="mpi", ranks=4, spec_path=spec, cores=2, oversubscribe=False)


def test_srun_argv_under_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    plan = build_launch(backend="mpi", ranks=8, spec_path=spec, executor_name="slurm", cores=2,
                        port=29513, slurm_nodes=2, extra_args=["--cpu-bind=cores"],
                        master_addr="node001")
    assert plan.launcher == "srun" and plan.argv[0] == "srun"
    assert "--ntasks=8" in plan.argv and "--nodes=2" in plan.argv and "--mpi=pmix" in plan.argv
    assert "--cpu-bind=cores" in plan.argv
    assert "--cpus-per-task=1" in plan.argv and plan.env["OMP_NUM_THREADS"] == "1"  # 2 cores / 8 ranks
    assert plan.argv[-1] == str(spec) and not plan.oversubscribed  # SLURM places the ranks
    assert plan.env["MASTER_ADDR"] == "node001" and "GLOO_SOCKET_IFNAME" not in plan.env
    ddp = build_launch(backend="ddp", ranks=4, spec_path=spec, executor_name="slurm", cores=2, port=1)
    assert "--mpi=pmix" not in ddp.argv
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")  # the job's allocation decides each rank's CPUs
    job = build_launch(backend="ddp", ranks=2, spec_path=spec, executor_name="slurm", cores=16, port=1)
    assert "--cpus-per-task=3" in job.argv and job.env["OMP_NUM_THREADS"] == "3"
    with pytest.raises(D5PipeError, match="distributed.ranks"):
        build_launch(backend="ddp", ranks=0, spec_path=spec)


def test_fixed_threads_per_rank_and_their_oversubscription(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    auto = build_launch(backend="ddp", ranks=2, spec_path=spec, cores=8, port=1)
    assert auto.threads_per_rank == 4 and auto.env["OMP_NUM_THREADS"] == "4"
    fixed = build_launch(backend="ddp", ranks=2, spec_path=spec, cores=8, port=1, threads_per_rank=1)
    assert fixed.threads_per_rank == 1 and fixed.env["OMP_NUM_THREADS"] == "1" and not fixed.oversubscribed
    over = build_launch(backend="mpi", ranks=2, spec_path=spec, cores=8, port=1, threads_per_rank=6)
    assert over.oversubscribed and "--oversubscribe" in over.argv
    with pytest.raises(D5PipeError, match="2 ranks x 6 threads on 8 cores"):
        build_launch(backend="ddp", ranks=2, spec_path=spec, cores=8, port=1, threads_per_rank=6,
                     oversubscribe=False)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    srun = build_launch(backend="ddp", ranks=2, spec_path=spec, executor_name="slurm", cores=2, port=1,
                        threads_per_rank=2)
    assert "--cpus-per-task=2" in srun.argv and not srun.oversubscribed  # the config wins over the job


def test_rank_launch_takes_the_nodes_of_the_merged_stage_resources(tmp_path) -> None:
    """executor.resources.default.nodes=2 gives a 2-node job; its ranks must start on 2 nodes
    (before, level 3 read only its own entry and started them with srun --nodes=1)."""
    from d5pipe.levels.contract import PointContext
    from d5pipe.levels.level3.point import launch_options

    def ctx(executor: dict) -> PointContext:
        cfg = {"distributed": {"backend": "ddp", "ranks": 4}}
        return PointContext("e", "level3", "p", {}, cfg, 1, tmp_path, tmp_path, tmp_path, executor)

    inherit = {"name": "slurm", "resources": {"default": {"nodes": 2}, "level3": {}}}
    assert launch_options(ctx(inherit))["slurm_nodes"] == 2
    own = {"name": "slurm", "resources": {"default": {"nodes": 2}, "level3": {"nodes": 3}}}
    assert launch_options(ctx(own))["slurm_nodes"] == 3
    assert launch_options(ctx({"name": "local"}))["slurm_nodes"] == 1


def test_bind_core_asks_the_ranks_to_pin_themselves_where_they_fit(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    for backend in ("mpi", "horovod"):  # auto: the MPI engines' ranks are bound
        bound = build_launch(backend=backend, ranks=2, spec_path=spec, cores=2, port=1, threads_per_rank=1)
        assert bound.binding == "core" and bound.env["D5PIPE_BIND"] == "core"
        assert bound.argv[bound.argv.index("D5PIPE_BIND") - 1] == "-x"  # mpirun hands it to the ranks
        assert "D5PIPE_LOWER_POLLERS" not in bound.env  # no polling thread of theirs is known
    for bind in ("auto", "core"):  # DDP's ranks too, and gloo's polling thread yields to theirs
        gloo = build_launch(backend="ddp", ranks=2, spec_path=spec, cores=2, port=1, bind=bind)
        assert gloo.binding == "core (polling threads at nice 19)" and gloo.env["D5PIPE_BIND"] == "core"
        assert gloo.env["D5PIPE_LOWER_POLLERS"] == "1"
    for backend in ("mpi", "ddp"):  # none: the OS places them, d5pipe changes no priority
        unbound = build_launch(backend=backend, ranks=2, spec_path=spec, cores=2, port=1, bind="none")
        assert unbound.binding == "none" and not {"D5PIPE_BIND", "D5PIPE_LOWER_POLLERS"} & set(unbound.env)
    crowded = build_launch(backend="ddp", ranks=4, spec_path=spec, cores=2, port=1, threads_per_rank=1)
    assert crowded.binding.startswith("none (oversubscribed") and crowded.binding.endswith("at nice 19)")
    assert "D5PIPE_BIND" not in crowded.env and crowded.env["D5PIPE_LOWER_POLLERS"] == "1"
    over = build_launch(backend="mpi", ranks=4, spec_path=spec, cores=2, port=1, threads_per_rank=1)
    assert over.binding.startswith("none (oversubscribed") and "D5PIPE_BIND" not in over.env
    srun = build_launch(backend="mpi", ranks=2, spec_path=spec, executor_name="slurm", cores=2, port=1)
    assert srun.binding == "srun" and "D5PIPE_BIND" not in srun.env  # SLURM places its tasks
    with pytest.raises(D5PipeError, match="distributed.bind"):
        build_launch(backend="mpi", ranks=2, spec_path=spec, cores=2, port=1, bind="socket")


def test_a_rank_program_other_than_the_worker_is_launched_the_same_way(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    mpi = build_launch(backend="mpi", ranks=2, spec_path=spec, cores=2, port=1, module="my.loop", worker_args=["a"])
    assert mpi.argv[-4:] == [sys.executable, "-m", "my.loop", "a"]
    ddp = build_launch(backend="ddp", ranks=2, spec_path=spec, cores=2, port=1, module="my.loop", worker_args=["a"])
    assert ddp.argv[-3:] == ["--module", "my.loop", "a"]
