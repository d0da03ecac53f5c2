"""Real multi-process runs of level 3: DDP (gloo), Horovod (MPI) and mpi4py ranks on this machine."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.contract import PointContext, run_closers
from d5pipe.levels.level3.launch import usable_cores
from d5pipe.levels.level3.point import run_point

HOSTILE = "x; touch owned"


_CACHES: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _close_rank_sessions() -> Iterator[None]:
    """A shard closes its rank sessions when it ends; a test calling run_point directly must too
    (idle Horovod ranks keep polling, and would take CPU from the rest of the suite)."""
    yield
    while _CACHES:
        run_closers(_CACHES.pop())


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("l3data")


def _ctx(tmp_path: Path, data_dir: Path, **dist: Any) -> PointContext:
    distributed = {
        "backend": "ddp", "ranks": 2, "scaling": "strong", "global_batch": 32, "per_rank_batch": 16,
        "steps": 4, "warmup_steps": 1, "benchmark": "train", "collective": "allreduce",
        "message_bytes": 4096, "launcher": "auto", "oversubscribe": True, "timeout_s": 240.0,
        "serial_check": True, "tolerance": 1e-4, "extra_args": [],
    }
    distributed.update(dist)
    config = {
        "name": HOSTILE, "seed": 5, "distributed": distributed,
        "model": {"name": "mlp", "hidden": [32], "dropout": 0.0},
        "dataset": {"name": "digits"},
        "train": {"optimizer": "adam", "lr": 0.01, "device": "cpu", "deterministic": True},
        "timer": {},
    }
    work = tmp_path / HOSTILE / "work"  # a hostile directory name travels in the spec path
    work.mkdir(parents=True)
    cache: dict[str, Any] = {}
    _CACHES.append(cache)
    return PointContext(HOSTILE, "level3", "pt", {}, config, 77, tmp_path, work, data_dir, {"name": "local"},
                        cache=cache)


def _metric(out: PointOutcome, name: str) -> Metric:
    return next(m for m in out.metrics if m.name == name)


def _assert_nothing_owned(tmp_path: Path) -> None:
    assert not list(tmp_path.rglob("owned")), "a config value was executed by a shell"
    assert not (Path.cwd() / "owned").exists()


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["ddp", "horovod", "mpi"])
def test_two_ranks_train_identically(backend: str, tmp_path: Path, data_dir: Path) -> None:
    ctx = _ctx(tmp_path, data_dir, backend=backend)
    out = run_point(ctx)
    assert _metric(out, "params_identical").value == "pass"
    assert _metric(out, "matches_serial").value == "pass", _metric(out, "serial_max_abs_diff").value
    # a 2-rank ring allreduce sends 2(n-1)/n = 1x the gradient per rank: counted payload must match
    counted = float(_metric(out, "comm_bytes_per_rank_step").value)  # type: ignore[arg-type]
    expected = float(_metric(out, "comm_ring_expected_bytes").value)  # type: ignore[arg-type]
    assert expected > 0 and abs(counted / expected - 1.0) <= 0.05
    assert _metric(out, "oversubscribed").value is (2 > usable_cores())
    assert len(out.samples["step_time_max_s"]) == 4
    assert _metric(out, "time_per_step_s").kind == "timing"
    ranks = [json.loads(p.read_text()) for p in sorted((ctx.work_dir / "ranks").glob("rank*.json"))]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["backend"] == backend for r in ranks)
    assert all(r["experiment"] == HOSTILE for r in ranks)  # arrived intact, as data
    # mlp [32] on digits, per-rank batch 16: forward, two weight gradients, one input gradient
    assert _metric(out, "flops_per_sample").value == 2 * (64 * 32 + 32 * 10) + 2 * 64 * 32 + 4 * 32 * 10
    gflops = float(_metric(out, "gflops").value)  # type: ignore[arg-type]
    assert gflops == pytest.approx(float(_metric(out, "samples_per_s").value)  # type: ignore[arg-type]
                                   * float(_metric(out, "flops_per_sample").value) / 1e9)  # type: ignore[arg-type]
    assert float(_metric(out, "pct_peak_flops").value) > 0  # type: ignore[arg-type]
    launch = out.extra["launch"]
    assert launch["ranks_reused"] and launch["launch_s"] > 0 and launch["rank_wall_s"] > 0  # it waited for its ranks
    work2 = ctx.work_dir.parent / "work2"
    work2.mkdir()
    again = run_point(dataclasses.replace(ctx, point_id="pt2", work_dir=work2))
    assert _metric(again, "matches_serial").value == "pass"
    assert again.extra["launch"]["launch_s"] == 0.0 and again.extra["launch"]["rank_wall_s"] > 0  # same ranks
    _assert_nothing_owned(tmp_path)


@pytest.mark.slow
@pytest.mark.mpi
def test_four_rank_allgather_collective(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the shard runner may hand over relative directories
    ctx = _ctx(Path("."), data_dir, backend="mpi", ranks=4, benchmark="collective",
               collective="allgather", message_bytes=1 << 16, steps=6, threads_per_rank=2)
    assert not ctx.work_dir.is_absolute()
    out = run_point(ctx)
    assert _metric(out, "collective_correct").value == "pass"
    assert _metric(out, "oversubscribed").value is (4 * 2 > usable_cores())
    assert _metric(out, "threads_per_rank").value == 2
    ranks = [json.loads(p.read_text()) for p in sorted((ctx.work_dir / "ranks").glob("rank*.json"))]
    assert [r["threads"] for r in ranks] == [2, 2, 2, 2]  # distributed.threads_per_rank reached torch
    assert _metric(out, "message_bytes").value == 1 << 16
    alg = float(_metric(out, "algbw_GBps").value)  # type: ignore[arg-type]
    bus = float(_metric(out, "busbw_GBps").value)  # type: ignore[arg-type]
    assert alg > 0 and bus == pytest.approx(alg * 3 / 4)
    assert len(out.samples["iter_time_max_s"]) == 6
    assert any("max over ranks" in note for note in out.extra["notes"])
    _assert_nothing_owned(tmp_path)


def test_horovod_torch_imports_with_mpi_and_gloo() -> None:
    import horovod.torch as hvd

    assert hvd.mpi_built() and hvd.gloo_built()


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("collective", ["allreduce", "broadcast"])
def test_two_rank_collective_is_bound_to_cores_and_records_its_buffer(tmp_path: Path, data_dir: Path,
                                                                      collective: str) -> None:
    """mpi4py's timed call (its numpy views made once: Backend.prepared) is the one checked."""
    ctx = _ctx(tmp_path, data_dir, backend="mpi", benchmark="collective", message_bytes=1 << 16, steps=3,
               threads_per_rank=1, buffer="peer", collective=collective)
    out = run_point(ctx)
    assert _metric(out, "collective_correct").value == "pass"
    assert _metric(out, "buffer").value == "peer" and _metric(out, "buffer_allocator").value == "numpy.ones"
    cpus = out.extra["launch"]["rank_cpus"]
    if usable_cores() >= 2:  # each rank on a core of its own
        assert _metric(out, "bind").value == "core" and _metric(out, "ranks_share_cpus").value is False
        assert len(cpus["0"]) == len(cpus["1"]) == 1 and cpus["0"] != cpus["1"]


@pytest.mark.slow
def test_two_rank_gloo_collective_binds_its_ranks_and_lowers_gloos_poller(
        tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bind: auto places DDP's ranks as the MPI engines' (a core each where they fit), and each rank's
    gloo polling thread runs at nice 19 once the process group is up (d5pipe.levels.level3.placement).
    The launch leaves nothing in the temporary directory (d5pipe.levels.level3.session.launch_tmp)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process's temporary directory, too
    ctx = _ctx(tmp_path, data_dir, backend="ddp", benchmark="collective", message_bytes=1 << 16, steps=3,
               threads_per_rank=1)
    out = run_point(ctx)
    assert _metric(out, "collective_correct").value == "pass"
    assert [p.name[:13] for p in temp.iterdir()] == ["d5pipe-ranks-"]  # the live session's, and nothing else
    run_closers(ctx.cache)  # as the shard does when it ends
    assert list(temp.iterdir()) == []  # torchrun's torchelastic_* directory went with its launch
    launch = out.extra["launch"]
    assert launch["env"]["D5PIPE_LOWER_POLLERS"] == "1" and "polling threads at nice 19" in launch["binding"]
    assert launch["polling_threads"] == {r: [{"name": "gloo_tcp_loop", "nice": 19}] for r in ("0", "1")}
    if usable_cores() >= 2:
        assert _metric(out, "bind").value == "core" and _metric(out, "ranks_share_cpus").value is False
