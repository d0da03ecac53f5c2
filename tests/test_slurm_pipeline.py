"""d5pipe end to end on the real local SLURM cluster (tests/cluster, session fixture ``slurm_cluster``).

Snakemake's SLURM plugin polls job states at growing intervals (3, 16, 39 s ... after a
submission with the test profile), so every DAG level costs 16-39 s however small its jobs are. To stay within the
suite's budget the runs below start together in one module fixture, each in a background thread
with a hard deadline (Snakemake SIGKILLed and the run's SLURM jobs cancelled when it passes);
the tests then wait for their run and check SLURM's own records (jobcomp log, squeue). All runs
start even when only one test is selected.

* ``slurm_mixed`` (4 level-0 points, one failing; one level-2 and one 2-rank level-3 point) on
  SLURM and, for comparison, locally;
* ``slurm_resume``: its shard job is scancelled after its first record, then the run resumed;
* ``compiled_toy``: a compiled operator's points in four shards after one ``build_operator`` job;
* ``slurm_sleep`` with a 1-minute walltime (SLURM's minimum; slurmctld enforces limits every
  30 s, so the job ends 60-90 s after it started) and, separately, under d5pipe's own timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest

from d5pipe.execute.slurm import cancel_run_jobs, query_jobs, run_jobs
from slurm_fixture import TEST_PROFILE, SlurmCluster
from tests.conftest import PLUGIN_FIXTURES, TESTING_OPS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(480)]

ROOT = Path(__file__).resolve().parents[1]
TEST_CONF = ROOT / "tests" / "configs"
SLOW_OPS_DIR = ROOT / "tests" / "cluster"  # slow_ops.SLEEP for slurm_sleep
COMPILED_DIR = ROOT / "examples" / "compiled_matmul"  # cpp_matmul, for compiled_toy
SLURM_OVERRIDES: tuple[str, ...] = (
    f"executor.extra_args=['--workflow-profile','{TEST_PROFILE}']",
    "executor.retries=0",
    "executor.jobs=8",
    "executor.resources.default.runtime_min=5",
    "executor.resources.default.mem_mb=256",
    "executor.arrays=false",  # one job per shard here; arrays: tests/test_slurm_multinode.py
)
MIXED_JOBS = 5  # prepare_data, level0 x2, level2, level3 (results and report: a local rule, no SLURM job)


# ------------------------------------------------------------------------------ helpers
def _env(cluster: SlurmCluster) -> dict[str, str]:
    env: dict[str, str] = dict(cluster.env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SLOW_OPS_DIR), str(PLUGIN_FIXTURES), str(COMPILED_DIR),
                                                    env.get("PYTHONPATH", "")) if p)
    # the runner allows the test operators (a config cannot)
    env["D5PIPE_ALLOW"] = f"slow_ops,{TESTING_OPS},cpp_matmul,broken_ops"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Run:
    """A ``d5pipe`` process in its own session, its output in ``log``."""

    run_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL d5pipe and its Snakemake, then cancel what the run left on SLURM.

        Snakemake runs in a session of its own (d5pipe kills its group on --timeout), so it is
        found among d5pipe's descendants rather than in d5pipe's process group."""
        if self.proc.poll() is None:
            try:
                family = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                family = []
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for child in family:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            self.proc.wait()
        cancel_run_jobs(self.run_dir, env=self.env)

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """Exit code and output; a run past ``timeout_s`` is killed and reported as an error."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.run_dir.name}: no exit within {timeout_s} s:\n"
                                 f"{self.output()[-3000:]}") from None
        return rc, self.output()


def _start(cluster: SlurmCluster, argv: list[str], run_dir: Path, log: Path,
           extra_env: dict[str, str] | None = None) -> Run:
    env = {**_env(cluster), **(extra_env or {})}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
    return Run(run_dir, log, proc, env)


def _d5pipe_run(cluster: SlurmCluster, experiment: str, run_dir: Path, executor: str,
                *overrides: str, extra_env: dict[str, str] | None = None) -> Run:
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", experiment, "--config-dir",
            str(TEST_CONF), "--out", str(run_dir), "--executor", executor]
    if executor == "slurm":
        argv += list(SLURM_OVERRIDES)
    argv += list(overrides)
    return _start(cluster, argv, run_dir, run_dir.with_suffix(".log"), extra_env)


def _status(cluster: SlurmCluster, run_dir: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "status", str(run_dir)],
                          capture_output=True, text=True, env=_env(cluster), timeout=60,
                          check=False)
    assert proc.returncode in (0, 3), proc.stderr  # 3: some point has not passed (yet)
    return proc.stdout


def _jobcomp(cluster: SlurmCluster, run_dir: Path) -> list[dict[str, str]]:
    """SLURM's completion records of the jobs that ran in ``run_dir``."""
    target = os.path.realpath(run_dir)
    return [r for r in cluster.jobcomp_records()
            if os.path.realpath(r.get("WorkDir", "")) == target]


def _wait_for(what: str, check: Callable[[], Any], deadline: float, run: Run) -> Any:
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    run.kill()
    raise AssertionError(f"{run.run_dir.name}: timed out waiting for {what}:\n{run.output()[-3000:]}")


def _records(run_dir: Path, stage: str | None = None) -> dict[str, dict[str, Any]]:
    pattern = f"{stage}/*.json" if stage else "*/*.json"
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "points").glob(pattern)}


def _shard_jobs(run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """``"level0 s00000"`` -> SLURM job ID, from the comments squeue keeps (MinJobAge=600)."""
    return {j.rule: j.job_id for j in run_jobs(run_dir, env=env)}


# ---------------------------------------------------------------------------- scenarios
@dataclass
class Finished:
    run_dir: Path
    rc: int
    output: str
    env: dict[str, str]


def mixed(cluster: SlurmCluster, run_dir: Path, executor: str) -> Finished:
    run = _d5pipe_run(cluster, "slurm_mixed", run_dir, executor)
    rc, out = run.finish(360)
    return Finished(run_dir, rc, out, run.env)


def mpi_backends(cluster: SlurmCluster, run_dir: Path) -> Finished:
    """mpi4py and Horovod allreduce points on 2 ranks: ranks wire up through srun --mpi=pmix."""
    run = _d5pipe_run(cluster, "slurm_mixed", run_dir, "slurm", "stages=[level3]",
                      "sweep.grid.distributed.backend=[mpi,horovod]")
    rc, out = run.finish(360)
    return Finished(run_dir, rc, out, run.env)


def compiled(cluster: SlurmCluster, run_dir: Path) -> Finished:
    """A compiled operator in 4 shards (issue 55): one build_operator job, its binary in the cache
    (shared with tests/test_compiled.py under ``make test``: built there or here, whichever is first)."""
    cache = os.environ.get("D5PIPE_TEST_COMPILED_CACHE") or str(run_dir.parent / "compiled-cache")
    run = _d5pipe_run(cluster, "compiled_toy", run_dir, "slurm", "sweep.grid.operators.op=[cpp_blocked]",
                      extra_env={"D5PIPE_CACHE_DIR": cache})
    rc, out = run.finish(420)
    return Finished(run_dir, rc, out, run.env)


@dataclass
class Resumed:
    run_dir: Path
    cancelled_job: str
    first_rc: int
    first_output: str
    records_before: dict[str, int]
    second_rc: int
    second_output: str
    records_after: dict[str, int]
    env: dict[str, str] = field(default_factory=dict)


def _mtimes(run_dir: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in (run_dir / "points" / "level0").glob("*.json")}


def scancel_and_resume(cluster: SlurmCluster, run_dir: Path) -> Resumed:
    """scancel the shard job once its first point is recorded; then ``d5pipe run`` again."""
    first = _d5pipe_run(cluster, "slurm_resume", run_dir, "slurm")
    deadline = time.monotonic() + 120

    def running_job_with_a_record() -> str | None:
        if first.proc.poll() is not None:
            raise AssertionError(f"first run ended before the scancel:\n{first.output()[-3000:]}")
        if not _mtimes(run_dir):
            return None
        jobs = [j for j in run_jobs(run_dir, env=first.env) if j.state == "RUNNING"]
        return jobs[0].job_id if jobs else None

    job_id = _wait_for("a record while the job runs", running_job_with_a_record, deadline, first)
    subprocess.run(["scancel", job_id], env=first.env, timeout=20, check=True)
    rc1, out1 = first.finish(240)
    before = _mtimes(run_dir)
    second = _d5pipe_run(cluster, "slurm_resume", run_dir, "slurm")
    rc2, out2 = second.finish(300)
    return Resumed(run_dir, job_id, rc1, out1, before, rc2, out2, _mtimes(run_dir), first.env)


@dataclass
class Walltime:
    run_dir: Path
    status_running: str
    status_after: str
    jobcomp: dict[str, str]
    output: str


def walltime(cluster: SlurmCluster, run_dir: Path) -> Walltime:
    """A 1-minute walltime on a point that sleeps 600 s: SLURM ends the job with TIMEOUT."""
    run = _d5pipe_run(cluster, "slurm_sleep", run_dir, "slurm",
                      "executor.resources.level0.runtime_min=1")
    start = time.monotonic()
    try:
        _wait_for("the job to run", lambda: any(j.state == "RUNNING" for j in run_jobs(
            run_dir, env=run.env)), start + 120, run)
        running = _status(cluster, run_dir)
        _wait_for("squeue to say TIMEOUT", lambda: any(
            j.state == "TIMEOUT" for j in run_jobs(run_dir, env=run.env)), start + 200, run)
        rec = _wait_for("the TIMEOUT record", lambda: next(
            (r for r in _jobcomp(cluster, run_dir) if r["JobState"] != "COMPLETED"), None),
            start + 210, run)
        after = _status(cluster, run_dir)
    finally:
        run.kill()  # Snakemake would notice only at its next poll, up to 40 s later
    return Walltime(run_dir, running, after, rec, run.output())


_TIMEOUT_DRIVER = """
import sys
from pathlib import Path
from d5pipe import D5PipeError
from d5pipe.execute.run import run
out, conf, timeout, *overrides = sys.argv[1:]
try:
    run("slurm_sleep", overrides, out=Path(out), executor="slurm", config_dirs=[conf],
        timeout=float(timeout))
except D5PipeError as exc:
    print("D5PipeError:", exc, flush=True)
    sys.exit(exc.exit_code)
"""


def hard_timeout(cluster: SlurmCluster, run_dir: Path, timeout_s: float) -> Finished:
    """d5pipe's own timeout (``runner.run(timeout=...)``) on a job that would sleep 600 s."""
    argv = [sys.executable, "-c", _TIMEOUT_DRIVER, str(run_dir), str(TEST_CONF), str(timeout_s),
            *SLURM_OVERRIDES]
    run = _start(cluster, argv, run_dir, run_dir.with_suffix(".log"))
    rc, out = run.finish(timeout_s + 60)
    return Finished(run_dir, rc, out, run.env)


SHIPPED = ("executor.resources.default.runtime_min=10", "executor.resources.default.mem_mb=256")
"""The shipped profile unchanged (no --workflow-profile): only what this small test node needs."""


def shipped_quickstart(cluster: SlurmCluster, run_dir: Path) -> Finished:
    """The quickstart on a cluster without accounting, with profiles/slurm as shipped."""
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "quickstart", "--out", str(run_dir),
            "--executor", "slurm", *SHIPPED, "repetitions=1"]
    run = _start(cluster, argv, run_dir, run_dir.with_suffix(".log"))
    rc, out = run.finish(900)
    return Finished(run_dir, rc, out, run.env)


@dataclass
class Terminated:
    rc: int
    seconds: float
    output: str
    job_states: dict[str, str]
    survivors: list[str]


def sigterm_mid_run(cluster: SlurmCluster, run_dir: Path) -> Terminated:
    """SIGTERM of ``d5pipe run`` while its job runs: it must end (before SLURM's own limits), jobs cancelled."""
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "slurm_sigterm", "--config-dir", str(TEST_CONF),
            "--out", str(run_dir), "--executor", "slurm", *SHIPPED]
    run = _start(cluster, argv, run_dir, run_dir.with_suffix(".log"))
    start = time.monotonic()
    _wait_for("the job to run", lambda: any(j.state == "RUNNING" for j in run_jobs(run_dir, env=run.env)),
              start + 300, run)
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    try:
        rc = run.proc.wait(timeout=150)
    except subprocess.TimeoutExpired:
        run.kill()
        rc = -1
    seconds = time.monotonic() - sent
    deadline = time.monotonic() + 30
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {j.job_id: j.state for j in run_jobs(run_dir, env=run.env)}
        if states and all(s in ("CANCELLED", "COMPLETED", "FAILED") for s in states.values()):
            break
        time.sleep(0.5)
    marker = f"--directory {os.path.realpath(run_dir)}"
    left = [_cmdline(p) for p in Path("/proc").glob("[0-9]*/cmdline") if marker in _cmdline(p)]
    return Terminated(rc, seconds, run.output(), states, left)


# ------------------------------------------------------------------------------ fixture
@pytest.fixture(scope="module")
def runs(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Future[Any]]]:
    """All SLURM runs of this module, started at once (they mostly wait on SLURM polling)."""
    base = tmp_path_factory.mktemp("slurm_pipeline")
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="slurm-run")
    futures: dict[str, Future[Any]] = {
        "walltime": pool.submit(walltime, slurm_cluster, base / "walltime"),
        "mixed": pool.submit(mixed, slurm_cluster, base / "mixed_slurm", "slurm"),
        "resume": pool.submit(scancel_and_resume, slurm_cluster, base / "resume"),
        "timeout": pool.submit(hard_timeout, slurm_cluster, base / "timeout", 30.0),
        "local": pool.submit(mixed, slurm_cluster, base / "mixed_local", "local"),
        "mpi": pool.submit(mpi_backends, slurm_cluster, base / "mpi_backends"),
        "shipped": pool.submit(shipped_quickstart, slurm_cluster, base / "shipped"),
        "sigterm": pool.submit(sigterm_mid_run, slurm_cluster, base / "sigterm"),
        "compiled": pool.submit(compiled, slurm_cluster, base / "compiled"),
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    for run_dir in base.iterdir():
        if run_dir.is_dir():
            cancel_run_jobs(run_dir, env=_env(slurm_cluster))


def _ok(fut: Future[Finished], rc: int = 0) -> Finished:
    """The finished run; ``rc`` 3 where a point is meant to fail (the exit code says so)."""
    res = fut.result(timeout=420)
    assert res.rc == rc, res.output[-4000:]
    return res


# -------------------------------------------------------------------------------- tests
def test_mixed_sweep_runs_on_slurm_with_the_points_and_metrics_of_a_local_run(
        slurm_cluster: SlurmCluster, runs: dict[str, Future[Any]]) -> None:
    on_slurm = _ok(runs["mixed"], 3)
    local = _ok(runs["local"], 3)
    records = _jobcomp(slurm_cluster, on_slurm.run_dir)
    assert len(records) == MIXED_JOBS, records
    assert {r["JobState"] for r in records} == {"COMPLETED"}
    assert len({r["Name"] for r in records}) == 1  # one Snakemake run (its UUID names the jobs)
    assert _jobcomp(slurm_cluster, local.run_dir) == []

    def rows(run_dir: Path) -> set[tuple[str, str, str]]:
        df = pd.read_parquet(run_dir / "results.parquet")
        df = df[~df["metric"].str.startswith("plausibility:")]  # warnings about this machine's noise
        return set(zip(df["point_id"], df["metric"], df["status"], strict=True))

    slurm_rows, local_rows = rows(on_slurm.run_dir), rows(local.run_dir)
    assert slurm_rows == local_rows
    stages = {r["stage"] for r in _records(on_slurm.run_dir).values()}
    assert stages == {"level0", "level2", "level3"}


def test_a_compiled_operator_is_built_by_one_job_before_its_shards(
        slurm_cluster: SlurmCluster, runs: dict[str, Future[Any]]) -> None:
    res = _ok(runs["compiled"])
    jobs = [j.rule for j in run_jobs(res.run_dir, env=res.env)]
    assert sum(r.startswith("build_operator") for r in jobs) == 1, jobs
    assert sum(r.startswith("level0") for r in jobs) == 4, jobs  # 2 sizes x 2 repetitions, one a shard
    (build,) = [json.loads(p.read_text()) for p in (res.run_dir / "builds").glob("*.json")]
    assert build["status"] == "ok" and build["outcome"] in ("built", "reused")
    records = _records(res.run_dir, "level0")
    assert len(records) == 4
    for rec in records.values():
        assert rec["status"] == "ok" and rec["extra"]["compiled"]["binary_sha256"] == build["binary_sha256"]
        assert rec["provenance"]["slurm_job_id"]  # measured in a SLURM job


def test_a_failing_point_is_recorded_and_the_rest_of_the_sweep_completes(
        runs: dict[str, Future[Any]]) -> None:
    res = _ok(runs["mixed"], 3)
    assert "1 of 6 points did not pass (1 failed)" in res.output
    records = _records(res.run_dir)
    failed = {pid: r for pid, r in records.items() if r["status"] == "failed"}
    assert list(failed) == [pid for pid in records if pid.startswith("fault_raise")]
    [rec] = failed.values()
    assert rec["error"] == "RuntimeError: injected failure"
    assert sorted(r["status"] for r in records.values()) == ["failed"] + ["ok"] * 5
    df = pd.read_parquet(res.run_dir / "results.parquet")
    row = df[(df["point_id"] == rec["point_id"])]
    assert list(row["status"]) == ["failed"] and "injected failure" in row["error"].iloc[0]
    assert list(row["verdict"]) == ["fail"]


def test_a_two_rank_level3_point_is_one_slurm_job_with_two_tasks(
        slurm_cluster: SlurmCluster, runs: dict[str, Future[Any]]) -> None:
    res = _ok(runs["mixed"], 3)
    [rec] = _records(res.run_dir, "level3").values()
    assert rec["status"] == "ok", rec["error"]
    launch = rec["extra"]["launch"]
    assert launch["launcher"] == "srun" and "--ntasks=2" in launch["argv"]
    level3_jobs = [j for j in run_jobs(res.run_dir, env=res.env) if j.rule.startswith("level3")]
    assert [j.job_id for j in level3_jobs] == [rec["provenance"]["slurm_job_id"]]
    [comp] = [r for r in _jobcomp(slurm_cluster, res.run_dir)
              if r["JobId"] == level3_jobs[0].job_id]
    assert comp["ProcCnt"] == "2" and comp["JobState"] == "COMPLETED"
    ranks = sorted((res.run_dir / "work" / "level3" / rec["point_id"] / "ranks").glob("rank*.json"))
    assert [json.loads(p.read_text())["rank"] for p in ranks] == [0, 1]


def test_mpi4py_and_horovod_ranks_wire_up_through_srun_pmix(runs: dict[str, Future[Any]]) -> None:
    res = _ok(runs["mpi"])
    recs = _records(res.run_dir, "level3")
    assert len(recs) == 2
    for rec in recs.values():
        assert rec["status"] == "ok", rec["error"]
        argv = rec["extra"]["launch"]["argv"]
        assert argv[0] == "srun" and "--mpi=pmix" in argv and "--ntasks=2" in argv
        metrics = {m["name"]: m["value"] for m in rec["metrics"]}
        # a 2-rank allreduce summed on both ranks (the worker also refuses a world of another size)
        assert metrics["collective_correct"] == "pass" and metrics["busbw_factor"] == 1.0
    assert {r["params"]["distributed.backend"] for r in recs.values()} == {"mpi", "horovod"}


def test_every_point_record_names_its_slurm_job_and_node(
        runs: dict[str, Future[Any]]) -> None:
    res = _ok(runs["mixed"], 3)
    jobs = _shard_jobs(res.run_dir, res.env)
    checked = 0
    for spec_path in sorted((res.run_dir / "plan").glob("level*/s*.json")):
        spec = json.loads(spec_path.read_text())
        job_id = jobs[f"{spec['stage']} {spec['shard']}"]
        for pt in spec["points"]:
            rec = json.loads((res.run_dir / "points" / spec["stage"] / f"{pt['point_id']}.json")
                             .read_text())
            assert rec["provenance"]["slurm_job_id"] == job_id
            assert rec["provenance"]["slurm_nodelist"] == "localhost"
            assert rec["provenance"]["slurm_cluster"] == "d5pipe-test"  # ClusterName of tests/cluster
            checked += 1
    assert checked == 6
    local = _ok(runs["local"], 3)
    assert all(r["provenance"]["slurm_job_id"] is None for r in _records(local.run_dir).values())


def test_hard_timeout_kills_snakemake_and_cancels_the_runs_slurm_jobs(
        runs: dict[str, Future[Any]]) -> None:
    res: Finished = runs["timeout"].result(timeout=420)
    assert res.rc == 124, res.output[-3000:]
    match = re.search(r"did not finish within 30 s \(--timeout; killed\); cancelled SLURM jobs: (\d+)",
                      res.output)
    assert match, res.output[-3000:]
    [job] = query_jobs(job_ids=[match.group(1)], env=res.env)
    deadline = time.monotonic() + 20
    while job.state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.2)
        [job] = query_jobs(job_ids=[match.group(1)], env=res.env)
    assert job.state == "CANCELLED"
    marker = f"--directory {os.path.realpath(res.run_dir)}"

    def survivors() -> list[str]:
        return [_cmdline(p) for p in Path("/proc").glob("[0-9]*/cmdline") if marker in _cmdline(p)]

    deadline = time.monotonic() + 15  # the job's own processes go after KillWait (2 s)
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors() == [], "a snakemake process of the run survived the timeout"


def _cmdline(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_scancel_mid_run_then_the_next_run_resumes_without_redoing_points(
        slurm_cluster: SlurmCluster, runs: dict[str, Future[Any]]) -> None:
    res: Resumed = runs["resume"].result(timeout=430)
    assert res.first_rc == 3, res.first_output[-3000:]  # points of the cancelled shard never ran
    assert f"slurm job {res.cancelled_job} (level0 s00000): CANCELLED" in res.first_output
    assert 1 <= len(res.records_before) < 4  # cancelled between two points
    assert res.second_rc == 0, res.second_output[-3000:]
    assert len(res.records_after) == 4
    for pid, mtime in res.records_before.items():
        assert res.records_after[pid] == mtime, f"{pid} was redone"
    comp = {r["JobId"]: r["JobState"] for r in _jobcomp(slurm_cluster, res.run_dir)}
    assert comp[res.cancelled_job] == "CANCELLED"
    records = _records(res.run_dir, "level0")
    assert {r["status"] for r in records.values()} == {"ok"}
    redo_jobs = {r["provenance"]["slurm_job_id"] for pid, r in records.items()
                 if pid not in res.records_before}
    assert res.cancelled_job not in redo_jobs and len(redo_jobs) == 1


def test_a_job_past_its_walltime_is_reported_as_timeout(runs: dict[str, Future[Any]]) -> None:
    res: Walltime = runs["walltime"].result(timeout=430)
    assert res.jobcomp["JobState"] == "TIMEOUT" and res.jobcomp["TimeLimit"] == "1"
    assert re.search(r"slurm job \d+ \(level0 s00000\): RUNNING", res.status_running)
    line = next(ln for ln in res.status_after.splitlines()
                if ln.startswith(f"slurm job {res.jobcomp['JobId']} "))
    assert "TIMEOUT" in line and "walltime" in line and "runtime_min" in line
    pending = res.status_after.splitlines()[1].split()
    assert pending[0] == "level0" and pending[-1] == "1"  # the point stays pending: re-runnable


def test_1000_point_sweep_is_submitted_as_at_most_20_jobs(slurm_cluster: SlurmCluster,
                                                          runs: dict[str, Future[Any]],
                                                          tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """Planned (``d5pipe plan --json``, in process) and dry-run by Snakemake; nothing runs.

    Last in the module: it runs while the walltime job sleeps."""
    from d5pipe.cli.main import main as d5pipe_main
    from d5pipe.execute.run import load_plan, prepare_run
    from d5pipe.execute.snakemake import build_command

    overrides = ["shards.max_jobs_per_stage=20", *SLURM_OVERRIDES]
    env = _env(slurm_cluster)
    capsys.readouterr()
    assert d5pipe_main(["plan", "slurm_sweep1000", *overrides, "--executor", "slurm",
                        "--config-dir", str(TEST_CONF), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    [level0] = summary["stages"]
    assert summary["points"] == level0["points"] == 1000
    assert 1 <= level0["jobs"] <= 20 and level0["points_per_shard"] * level0["jobs"] >= 1000

    plan = load_plan("slurm_sweep1000", overrides, [str(TEST_CONF)], "slurm")
    prepare_run(plan, tmp_path, overrides)
    cmd = build_command(tmp_path, plan.config["executor"], dry_run=True)
    assert cmd[cmd.index("--executor") + 1] == "slurm"
    dry = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    text = dry.stdout + dry.stderr
    assert dry.returncode == 0, text[-3000:]
    counts = dict(re.findall(r"^(level0|aggregate|report|total)\s+(\d+)\s*$", text, re.M))
    assert int(counts["level0"]) == level0["jobs"], text[-3000:]
    assert int(counts["total"]) <= 20 + 3  # shards + aggregate + report + all


def test_the_shipped_profile_completes_on_a_cluster_without_accounting(runs: dict[str, Future[Any]]) -> None:
    res: Finished = runs["shipped"].result(timeout=960)
    assert res.rc in (0, 3), res.output[-4000:]  # 3: a plausibility check may flag this busy node
    records = _records(res.run_dir)
    assert len(records) == 8 and {r["status"] for r in records.values()} == {"ok"}
    assert (res.run_dir / "report.html").is_file()
    assert "SLURM job status from squeue" in res.output  # sacct cannot answer without slurmdbd


def test_sigterm_ends_a_slurm_run_and_cancels_its_jobs(runs: dict[str, Future[Any]]) -> None:
    res: Terminated = runs["sigterm"].result(timeout=500)
    assert res.rc == 128 + signal.SIGTERM, res.output[-3000:]
    # a generous ceiling, not a wall time: alone it ends in seconds; beside three busy test lanes on
    # two cores, squeue and scancel alone have taken 40 s
    assert res.seconds <= 110, f"took {res.seconds:.1f} s"
    assert "stopped by SIGTERM" in res.output and "cancelled SLURM jobs" in res.output
    assert res.job_states and set(res.job_states.values()) <= {"CANCELLED", "COMPLETED", "FAILED"}, res.job_states
    assert res.survivors == []
