"""A site's limits and d5pipe's admission of submissions under them, without a cluster.

The real runs are in tests/test_slurm_scale.py (a 16-node sandbox with the limits lowered). Here a
small simulated queue stands in for slurmctld: it starts pending array tasks as far as each
array's ArrayTaskThrottle allows and finishes running ones in random order, and the
:class:`~d5pipe.execute.slurm_executor.Flight` admits submissions against what ``squeue`` would say.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from d5pipe.execute.slurm_flight import Flight, parse_queue
from d5pipe.execute.slurm_limits import SiteLimits, parse_config, parse_max_submit, submission_plan

CONFIG = """Configuration data as of 2026-12-05T23:50:00
MaxArraySize            = 1001
MaxJobCount             = 10000
MinJobAge               = 300 sec
"""


def test_limits_are_read_from_scontrol_and_sacctmgr_text() -> None:
    assert parse_config(CONFIG) == {"MaxArraySize": 1001, "MaxJobCount": 10000, "MinJobAge": 300}
    assert parse_config("MinJobAge = 1h\n")["MinJobAge"] == 3600
    assert parse_max_submit("\n30\n\n100\n") == 30 and parse_max_submit("\n\n") is None


def test_arrays_never_use_an_index_at_the_limit_and_fit_what_may_be_submitted() -> None:
    """MaxArraySize caps the index: a default site takes indices 0..1000, so chunks of at most 1000
    numbered from 1, and of at most what one call carries (TASKS_PER_CALL, ~770); a chunk is never
    larger than what the site lets one user submit at once."""
    from d5pipe.execute.slurm_limits import TASKS_PER_CALL

    default = submission_plan(2000, SiteLimits(), 1000)
    assert (default.chunk, default.arrays, default.waves) == (TASKS_PER_CALL, 3, 1)
    assert submission_plan(2000, SiteLimits(), 500).chunk == 500
    low = SiteLimits(max_array_size=11, max_job_count=40, max_submit_jobs=30)
    plan = submission_plan(150, low, 1000)
    assert (plan.chunk, plan.arrays) == (10, 15) and plan.waves == 5  # 3 arrays of 10 fit under 30
    assert SiteLimits(max_array_size=1001, max_job_count=40).array_chunk(1000) == 38  # 5% of 40 kept free
    assert submission_plan(0, low, 1000).arrays == 0
    # a stage larger than the room goes in arrays of half of it: one runs while the next fills
    waves = submission_plan(2000, SiteLimits(max_job_count=400), 1000)
    assert (waves.chunk, waves.arrays) == (190, 11) and waves.waves == 6
    assert submission_plan(380, SiteLimits(max_job_count=400), 1000).chunk == 380  # fits: one array


class FakeSlurm:
    """slurmctld as far as the Flight sees it: arrays with throttles, tasks that start and finish."""

    def __init__(self, name: str, seed: int = 0, finish_p: float = 0.5) -> None:
        self.name, self.finish_p = name, finish_p
        self.rng = random.Random(seed)
        self.next_id = 100
        self.tasks: dict[str, list[str]] = {}  # array id -> task states
        self.throttle: dict[str, int] = {}
        self.held: set[str] = set()  # --begin not reached yet
        self.others = 0  # other users' jobs in the controller
        self.lock = threading.Lock()
        self.most_running = 0
        self.done: dict[str, int] = {}  # array id -> tasks ended (the exit files they wrote)
        self.queries = 0

    def finished(self, aid: str) -> int:
        with self.lock:
            return self.done.get(aid, 0)

    def submit(self, n: int) -> str:
        with self.lock:
            aid = str(self.next_id)
            self.next_id += 1
            self.tasks[aid] = ["PENDING"] * n
            self.held.add(aid)
            return aid

    def update(self, args: list[str]) -> None:
        with self.lock:
            aid = args[0].split("=")[1]
            key, value = args[1].split("=")
            if key == "ArrayTaskThrottle":
                self.throttle[aid] = int(value)
            elif key == "StartTime":
                self.held.discard(aid)

    def step(self) -> None:
        """SLURM's scheduler starts what throttles allow; some running tasks finish; purge old ones."""
        with self.lock:
            for aid, states in self.tasks.items():
                for i, s in enumerate(states):
                    if s == "RUNNING" and self.rng.random() < self.finish_p:
                        states[i] = "COMPLETED"
                        self.done[aid] = self.done.get(aid, 0) + 1
                if aid in self.held:
                    continue
                cap = self.throttle.get(aid, len(states))
                for i, s in enumerate(states):
                    if s == "PENDING" and states.count("RUNNING") < cap:
                        states[i] = "RUNNING"
            running = sum(st.count("RUNNING") for st in self.tasks.values())
            self.most_running = max(self.most_running, running)
            self.tasks = {a: st for a, st in self.tasks.items() if any(s != "COMPLETED" for s in st)}

    def squeue(self) -> str:
        with self.lock:
            self.queries += 1
            lines = [f"{a}|{k + 1}|{s}|{self.name}|me" for a, st in self.tasks.items() for k, s in enumerate(st)]
            lines += [f"{9000 + k}|N/A|RUNNING|other|you" for k in range(self.others)]
            return "\n".join(lines)


@pytest.mark.parametrize("files", [False, True])
def test_the_run_wide_limit_holds_across_arrays_and_every_task_runs(files: bool) -> None:
    """Eight arrays of ten (two stages' worth) under executor.jobs=7: never more than 7 running at
    once, whatever order tasks finish in, and every array submitted and run to the end -- with or
    without the exit files' word (which spares looks at the queue: the next test)."""
    run_arrays(FakeSlurm("run-1", seed=3), files)


def test_the_exit_files_spare_looks_at_the_queue() -> None:
    """While the files say the filling array cannot have started its last tasks, or that no task
    ended since the last look, the queue is not asked: fewer squeue calls for the same run (tasks
    that last several looks, as real ones do)."""
    blind, told = FakeSlurm("run-6", seed=5, finish_p=0.05), FakeSlurm("run-6", seed=5, finish_p=0.05)
    run_arrays(blind, files=False)
    run_arrays(told, files=True)
    assert told.queries < blind.queries / 2, (told.queries, blind.queries)


def run_arrays(slurm: FakeSlurm, files: bool) -> None:
    flight = Flight(SiteLimits(max_array_size=11, max_job_count=40, max_submit_jobs=30), limit=7,
                    name=slurm.name, query=slurm.squeue, update=slurm.update, poll_s=0.0, user="me",
                    finished=slurm.finished if files else None)
    submitted = 0
    for _array in range(8):
        while not flight.try_admit(10, array=True):
            slurm.step()
            if flight.busy():  # as the executor's loop: a look at the queue only when a throttle may rise
                flight.raise_throttle()
        try:
            aid = slurm.submit(10)
            flight.submitted(aid, 10)
            submitted += 1
        finally:
            flight.lock.release()
        slurm.step()
        if flight.busy():
            flight.raise_throttle()
    for _ in range(200):
        slurm.step()
        if flight.busy():
            flight.raise_throttle()
    assert submitted == 8 and not slurm.tasks
    assert 1 <= slurm.most_running <= 7


def test_one_array_that_holds_the_whole_limit_needs_no_look_at_the_queue() -> None:
    slurm = FakeSlurm("run-4")
    flight = Flight(SiteLimits(), limit=20, name="run-4", query=slurm.squeue, update=slurm.update, poll_s=0.0,
                    user="me")
    assert flight.admit_now(250, array=True)
    flight.submitted(slurm.submit(250), 250)
    flight.lock.release()
    assert flight.throttle and not flight.busy()  # throttle 20 = the run's limit: it cannot rise


def test_submissions_wait_for_room_under_max_job_count_and_say_why() -> None:
    slurm = FakeSlurm("run-2")
    slurm.others = 35
    said: list[str] = []
    flight = Flight(SiteLimits(max_array_size=11, max_job_count=40), limit=100, name="run-2",
                    query=slurm.squeue, update=slurm.update, poll_s=0.0, user="me", say=said.append)
    assert not flight.admit_now(10, array=True)
    assert "MaxJobCount=40" in flight.why
    slurm.others = 20
    assert flight.admit_now(10, array=True)
    flight.lock.release()


def test_a_stopped_flight_admits_nothing() -> None:
    slurm = FakeSlurm("run-3")
    slurm.others = 100
    flight = Flight(SiteLimits(max_job_count=40), limit=1, name="run-3", query=slurm.squeue,
                    update=slurm.update, poll_s=0.01, user="me")
    flight.stopped.set()
    assert flight.admit(5, array=True) is False


@pytest.mark.parametrize("state,pending", [("PENDING", 1), ("RUNNING", 0)])
def test_the_queue_view_counts_the_run_the_user_and_the_controller(state: str, pending: int) -> None:
    text = "\n".join([f"7|3|{state}|run|me", "7|4|COMPLETED|run|me", "8|N/A|RUNNING|run|me",
                      "9|N/A|PENDING|other|me", "10|N/A|RUNNING|x|you", "garbage"])
    view = parse_queue(text, "run", "me")
    assert view.controller_jobs == 5 and view.user_active == 3 and view.singles == 1
    assert view.pending.get("7", 0) == pending and view.running.get("7", 0) == 1 - pending
    assert view.filling == ("7" if pending else None)


def test_an_array_call_of_script_commands_stays_under_the_kernels_argument_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin sends every task's command in one ``sh -c`` argument (and again in each task's
    command line): over 128 KiB, its fallback lost the commands and every task ran task 1's shard."""
    import base64
    import json
    import subprocess
    import zlib

    from d5pipe.execute.slurm_job_scripts import job_script, snakemake_body
    from d5pipe.execute.slurm_limits import TASKS_PER_CALL

    monkeypatch.chdir(tmp_path)  # jobs start in the run directory; the scripts' paths are relative to it
    rng = random.Random(7)
    calls = [job_script(snakemake_body(f"echo shard s{i:05d} {rng.getrandbits(64):x}"))
             for i in range(1, TASKS_PER_CALL + 1)]
    payload = base64.b64encode(json.dumps(
        {str(i): zlib.compress(c.encode(), level=9).hex() for i, c in enumerate(calls, start=1)}).encode())
    assert 500 < TASKS_PER_CALL and len(calls[0]) + len(payload) < 128 * 1024 - 4096
    out = subprocess.run(calls[41].split() + ["--slurm-jobstep-array-execs=x"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["shard", "s00042"] and out[-1] == "--slurm-jobstep-array-execs=x"
    assert len(set(calls)) == len(calls) and job_script("s1") == job_script("s1")  # one script per command


def test_every_task_of_an_array_runs_its_own_rule_command_without_snakemake(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The array call as the plugin builds it (the first task's command, then the others' in a
    payload); each task, by its SLURM_ARRAY_TASK_ID, runs its own shell rule's command directly."""
    import base64
    import json
    import subprocess
    import zlib
    from types import SimpleNamespace

    from d5pipe.execute.slurm_job_scripts import direct_body, job_script, rule_shell

    monkeypatch.chdir(tmp_path)
    jobs = [SimpleNamespace(is_group=lambda: False, is_shell=True, output=[f"shards/s{i}.json"],
                            log=[f"logs/level0/s{i}.log"], shellcmd=f"echo task {i} > shards/s{i}.json")
            for i in (1, 2, 3)]
    calls = [job_script(direct_body(*rule_shell(j))) for j in jobs]  # type: ignore[misc]
    payload = base64.b64encode(json.dumps(
        {str(i): zlib.compress(c.encode()).hex() for i, c in enumerate(calls, start=1) if i > 1}).encode()).decode()
    wrap = f"{calls[0]} --slurm-jobstep-array-execs={payload}"
    import d5pipe

    src = str(Path(d5pipe.__file__).resolve().parents[1])  # the d5pipe under test, wherever the task starts
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    for index in ("1", "2", "3"):
        subprocess.run(["sh", "-c", wrap], env={**env, "SLURM_ARRAY_TASK_ID": index}, check=True)
    assert [(tmp_path / "shards" / f"s{i}.json").read_text().strip() for i in (1, 2, 3)] == \
        ["task 1", "task 2", "task 3"]
    assert (tmp_path / "logs" / "level0").is_dir()  # the rule's log folder, made as Snakemake would
    script_rule = SimpleNamespace(is_group=lambda: False, is_shell=False, shellcmd=None, output=[], log=[])
    assert rule_shell(script_rule) is None  # runs in a Snakemake of its own
    assert subprocess.run(["sh", "-c", job_script(direct_body("exit 3", []))]).returncode == 3


def _bare_executor(tmp_path: Path) -> Any:
    """d5pipe's executor without Snakemake: what a status round reads, nothing submitted."""
    from d5pipe.execute.slurm_executor import Executor
    from d5pipe.execute.slurm_status import Feed, Schedule
    from d5pipe.rundir.slurm_events import Outage

    executor = Executor.__new__(Executor)
    executor._status_query_calls, executor._status_query_failures = 0, 0
    executor.status_outage = Outage(tmp_path / "events.jsonl", "status", "the job status query")
    executor.exits, executor.failed_exits = {}, set()
    executor.feed, executor._fed_answer, executor.feed_path = Feed(0.0, ["-"]), None, tmp_path / "status.json"
    executor.schedule = Schedule(0.0)
    executor.succeeded = []
    executor.report_job_success = executor.succeeded.append
    executor.ready = True
    return executor


def test_a_status_round_before_the_executor_is_set_up_keeps_every_job() -> None:
    """Snakemake starts the status loop before the executor's __post_init__: a round then must not
    touch what __post_init__ sets (it died there, and the run waited forever)."""
    import asyncio

    from d5pipe.execute.slurm_executor import Executor

    executor = Executor.__new__(Executor)  # nothing set up

    async def round_() -> list[Any]:
        return [j async for j in executor.check_active_jobs(["job-1"])]

    assert asyncio.run(round_()) == ["job-1"]


def _job(jobid: int, slurm_id: str) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(job=SimpleNamespace(jobid=jobid), external_jobid=slurm_id)


def test_a_status_round_whose_query_failed_keeps_every_job_active(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin yields no job of a round whose sacct failed (slurmdbd stopped): Snakemake then
    never hears of them again. d5pipe's executor gives them back and logs the outage."""
    import asyncio

    import snakemake_executor_plugin_slurm as plugin

    from d5pipe.rundir.slurm_events import read

    async def failed_round(self: Any, active_jobs: list[Any]) -> Any:
        self._status_query_failures += 3  # every attempt of the round failed
        for _ in ():
            yield _

    monkeypatch.setattr(plugin.Executor, "check_active_jobs", failed_round)
    executor = _bare_executor(tmp_path)
    jobs = [_job(1, "71"), _job(2, "72")]

    async def round_() -> list[Any]:
        return [j async for j in executor.check_active_jobs(jobs)]

    assert asyncio.run(round_()) == jobs
    assert [e["state"] for e in read(tmp_path / "events.jsonl")] == ["down"]


def test_a_job_ends_by_its_exit_file_and_the_scheduler_is_asked_only_when_due(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 0 under the job's own SLURM ID: a success with no status query; a file of another
    attempt counts for nothing; a failure asks the scheduler at once (a requeued task's first
    attempt may end 143), and what it says decides. Rounds grow apart; the driver's view is written."""
    import asyncio
    import subprocess

    import snakemake_executor_plugin_slurm as plugin

    from d5pipe.execute.slurm_job_scripts import direct_body, exit_file, job_script
    from d5pipe.execute.slurm_status import Feed, Schedule

    monkeypatch.chdir(tmp_path)
    asked: list[list[str]] = []

    async def plugin_round(self: Any, active_jobs: list[Any]) -> Any:
        self._status_query_calls += 1
        self.feed.answered, self.feed.states = 1e12, {j.external_jobid: "RUNNING" for j in active_jobs}
        asked.append([j.external_jobid for j in active_jobs])
        for job in active_jobs:
            yield job

    monkeypatch.setattr(plugin.Executor, "check_active_jobs", plugin_round)
    executor = _bare_executor(tmp_path)
    executor.schedule = Schedule(first_s=1e6)  # not due by the clock
    calls = {n: job_script(direct_body(f": job {n}; exit {code}", [])) for n, code in ((1, 0), (2, 0), (3, 143), (4, 0))}
    executor.exits = {n: exit_file(c) for n, c in calls.items()}
    env = {**os.environ, "SLURM_ARRAY_JOB_ID": "90", "SLURM_ARRAY_TASK_ID": "1"}
    subprocess.run(["sh", "-c", calls[1]], env=env)
    subprocess.run(["sh", "-c", calls[2]], env={**env, "SLURM_ARRAY_TASK_ID": "9"})  # another attempt's ID
    jobs = [_job(1, "90_1"), _job(2, "90_2"), _job(4, "94")]

    def round_(active: list[Any]) -> list[Any]:
        async def collect() -> list[Any]:
            return [j async for j in executor.check_active_jobs(active)]
        return asyncio.run(collect())

    left = round_(jobs)
    assert executor.succeeded == [jobs[0]] and left == jobs[1:] and asked == []  # no scheduler call
    feed = Feed.read(tmp_path / "status.json")
    assert feed is not None and feed.waiting == ["90_2", "94"] and feed.answered is None
    subprocess.run(["sh", "-c", calls[3]], env={**os.environ, "SLURM_JOB_ID": "93"})
    failed = _job(3, "93")
    left = round_([*left, failed])
    assert asked == [["90_2", "94", "93"]] and failed in left  # asked at once; RUNNING: requeued, kept
    left = round_(left)
    assert len(asked) == 1  # the same failed attempt does not ask twice
    assert executor.schedule.every_s == executor.schedule.max_s == 600  # pauses double (up to 10 minutes)
    feed = Feed.read(tmp_path / "status.json")
    assert feed is not None and feed.known("93") and dict(feed.jobs())["90_2"] == "RUNNING"
    assert not feed.usable(started=feed.written + 1)  # a feed written before the run began is not its view
