"""The SLURM array scheduling arguments and the driver's watchdog, without a cluster (the cluster
runs are in tests/test_slurm_pipeline.py: a 60-shard stage, and an sbatch that drops an array)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.execute.slurm import SlurmJob
from d5pipe.execute.slurm_arrays import FLIGHT_KEY, POLL_KEY, SLOTS, THROTTLE_KEY, scheduler_args, scheduler_jobs
from d5pipe.execute.slurm_watchdog import STALLED_EXIT, Stalled, Watchdog, pending_shards
from d5pipe.rundir.layout import RunDir


def test_with_arrays_snakemake_gets_room_for_every_planned_job_and_the_executor_gets_the_limits() -> None:
    """Snakemake's --jobs and rate limit hold every planned job, so the plugin never gets a partial
    batch of a rule (plugin issue #473); --jobs becomes the run-wide limit of d5pipe's executor and
    the non-array slots, executor.array_throttle its cap per array."""
    ex = {"name": "slurm", "arrays": True, "jobs": 20}
    assert scheduler_jobs(ex, 62) == 62 and scheduler_jobs(ex, 5) == 20
    args = scheduler_args(ex, 62)
    assert args[args.index("--max-jobs-per-timespan") + 1] == "62/1s"
    assert args[args.index("--resources") + 1] == f"{SLOTS}=20"
    config = args[args.index("--config") + 1:]
    assert config == [f"{THROTTLE_KEY}=0", f"{FLIGHT_KEY}=20", f"{POLL_KEY}=10"]
    assert f"{FLIGHT_KEY}=4" in scheduler_args(ex, 62, jobs=4)  # d5pipe run --jobs 4
    assert f"{THROTTLE_KEY}=3" in scheduler_args({**ex, "array_throttle": 3}, 62)
    off = {**ex, "arrays": False}
    assert scheduler_jobs(off, 62) == 20 and scheduler_args(off, 62)[0] == "--config"
    assert scheduler_args({"name": "local", "jobs": 2}, 62) == []


def _run_dir(tmp_path: Path, shards: int) -> RunDir:
    import json

    names = [f"s{i:05d}" for i in range(shards)]
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "index.json").write_text(json.dumps(
        {"stages": {"level0": {"shards": names}}, "datasets": {}}))
    (tmp_path / "shards" / "level0").mkdir(parents=True)
    return RunDir(tmp_path)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _job(job_id: str, state: str) -> SlurmJob:
    return SlurmJob(job_id, state, "uuid", "rule_level0", "n1", "5:00", "0:01", "None")


def test_pending_shards_are_the_planned_shards_without_a_marker(tmp_path: Path) -> None:
    rd = _run_dir(tmp_path, 3)
    (tmp_path / "shards" / "level0" / "s00001.json").write_text("{}")
    (tmp_path / "shards" / "level0" / "s00002.attempts").write_text("")
    assert pending_shards(rd) == ["level0 s00000", "level0 s00002"]


def test_the_watchdog_stops_a_run_whose_pending_shards_slurm_does_not_hold(tmp_path: Path) -> None:
    rd = _run_dir(tmp_path, 12)
    clock, jobs = Clock(), [_job("7_0", "RUNNING")]
    dog = Watchdog(rd, lambda: jobs, stall_s=100, poll_s=10, clock=clock,
                   waiting_for=lambda: ["7_0", "99_0"])
    assert dog.check() is None
    for t in range(10, 400, 10):  # a job runs: never a stall, however long
        clock.t = t
        assert dog.check() is None
    for i in range(6):
        (tmp_path / "shards" / "level0" / f"s{i:05d}.json").write_text("{}")
    jobs[0] = _job("7_0", "COMPLETED")
    clock.t = 400
    assert dog.check() is None  # progress: quiet from here
    notices = []
    with pytest.raises(Stalled) as err:
        while clock.t < 1000:
            clock.t += 10
            line = dog.check()
            if line:
                notices.append((clock.t, line))
    assert 500 < clock.t <= 520  # stall_s after the last change, at the next poll
    assert [t for t, _ in notices] == [460]
    assert "no job of this run in SLURM for 60 s; 6 shard(s) pending" in notices[0][1]
    msg = str(err.value)
    assert "\n" not in msg and err.value.exit_code == STALLED_EXIT == 75
    assert "6 shard(s) are pending" in msg and "level0 s00006" in msg and "level0 s00011" in msg
    assert "99_0" in msg and "7_0" not in msg.split("Snakemake still waits")[1]
    assert "run the same command again to resume" in msg


def test_progress_or_an_unanswering_squeue_restarts_the_quiet_clock(tmp_path: Path) -> None:
    rd = _run_dir(tmp_path, 4)
    clock = Clock()
    answer: list[object] = [[]]

    def jobs() -> list[SlurmJob]:
        if isinstance(answer[0], Exception):
            raise answer[0]
        return answer[0]  # type: ignore[return-value]

    dog = Watchdog(rd, jobs, stall_s=50, poll_s=10, clock=clock)
    dog.check()
    for step in range(1, 5):  # a shard finishes every 40 s: quiet, but never stuck
        clock.t = 40.0 * step
        (tmp_path / "shards" / "level0" / f"s{step - 1:05d}.json").write_text("{}") if step < 4 else None
        assert dog.check() is None
    answer[0] = D5PipeError("squeue did not answer")
    clock.t += 1000
    assert dog.check() is None
    done = Watchdog(rd, lambda: [], stall_s=1, poll_s=0, clock=clock)
    for name in ("s00003",):
        (tmp_path / "shards" / "level0" / f"{name}.json").write_text("{}")
    for _ in range(5):  # nothing pending: never a stall
        clock.t += 100
        assert done.check() is None


def test_array_tasks_not_started_yet_are_known_to_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeue prints an array's tasks not started yet as one ``751_[434-500%20]`` line: a task
    among them is queued, not lost (at 500 shards under --jobs 20 a task waited past the watch's
    600 s and the run was stopped as if SLURM had lost it)."""
    import d5pipe.execute.slurm_watch as watch_module
    from d5pipe.execute.slurm import array_tasks
    from d5pipe.execute.slurm_watch import SlurmWatch

    assert array_tasks("751_[434-436%20]") == {"751_434", "751_435", "751_436"}
    assert array_tasks("751_[1,3-4]") == {"751_1", "751_3", "751_4"} and array_tasks("751_9") == {"751_9"}
    queue = [SlurmJob("751_[434-500%20]", "PENDING", "r", "", "", "30:00", "0:00", "JobArrayTaskLimit"),
             SlurmJob("751_415", "RUNNING", "r", "", "node3", "30:00", "0:05", "None")]
    monkeypatch.setattr(watch_module, "query_jobs", lambda **_kw: queue)
    monkeypatch.setattr(watch_module, "slurm_answer", lambda *_a, **_kw: None)  # sacct lists no pending task
    watch = SlurmWatch(None, poll_s=0.0)
    assert watch._known(["751_432", "751_434", "751_415", "751_501"]) == {"751_434", "751_415"}


def test_the_driver_reads_the_executors_view_and_asks_slurm_only_when_it_is_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the executor's view (logs/slurm_status.json) is fresh the driver's watch makes no
    scheduler call and judges from its last answer (a job it lacks 30 s after the executor first
    waited for it is unknown to SLURM: not active for the watchdog, lost for the watch); a stale
    view (a hung executor) or none sends it back to squeue."""
    import time

    import d5pipe.execute.slurm_watch as watch_module
    from d5pipe.execute.slurm_status import WRITTEN_STALE_S, Feed
    from d5pipe.execute.slurm_watch import SlurmWatch, StatusLost

    asked: list[object] = []

    def squeue(**_kw: object) -> list[SlurmJob]:
        asked.append(_kw)
        return [SlurmJob("71", "RUNNING", "r", "", "", "", "", "")]

    monkeypatch.setattr(watch_module, "query_jobs", squeue)
    began = time.time() - 1000
    path = tmp_path / "status.json"
    now = time.time()
    Feed(now, ["71", "72_3", "99", "100"], answered=now, states={"71": "RUNNING", "72": "PENDING"},
         since={"71": now - 100, "72_3": now - 100, "99": now - 100, "100": now - 5}).write(path)
    watch = SlurmWatch(None, poll_s=0.0, unknown_after_s=0.0, view=lambda: Feed.read_usable(path, began))
    watch.feed("Job 0 has been submitted with SLURM jobid 71 (log: x).")
    watch.feed("Job 1 has been submitted with SLURM jobid 99 (log: x).")
    assert watch._known(["71", "72_3", "99", "100"]) == {"71", "72_3", "100"} and asked == []  # 100: too new to judge
    view = Feed.read_usable(path, began)
    assert view is not None and view.jobs() == [("100", "PENDING"), ("71", "RUNNING"), ("72", "PENDING"),
                                                ("72_3", "PENDING")]  # 99: SLURM does not know it
    with pytest.raises(StatusLost, match="job 99 is unknown"):
        watch._last = -1e9
        watch.check()
        time.sleep(0.01)
        watch._last = -1e9
        watch.check()
    assert asked == []
    Feed(time.time() - WRITTEN_STALE_S - 1, ["71"], answered=time.time()).write(path)  # the executor stopped writing
    assert watch._known(["71"]) == {"71"} and len(asked) == 1
    assert Feed.read_usable(path, began) is None
    young = Feed.read_usable(tmp_path / "none.json", time.time() - 5)  # the executor has not written yet
    assert young is not None and young.jobs() == [] and Feed.read_usable(tmp_path / "none.json", began) is None
