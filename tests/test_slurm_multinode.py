"""d5pipe on the 3-node SLURM test cluster (tests/cluster/multinode_cluster.py, slurmdbd + MariaDB).

The runs start together in one module fixture (they mostly wait on SLURM's polling):

* ``multinode_l3``: 4 ranks on 2 nodes for DDP, Horovod and mpi4py in one shard job;
* ``multinode_sweep``: 12 level-0 points in 6 shards, submitted as a job array throttled to 2;
* ``nodes``: two level-0 points on each of the three nodes (``placement.node``);

and the tests then check SLURM's own accounting (sacct) against d5pipe's records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from natsort import natsorted

from multinode_fixture import MultiNodeCluster
from slurm_fixture import TEST_PROFILE
from tests.conftest import PLUGIN_FIXTURES, TESTING_OPS

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
TEST_CONF = ROOT / "tests" / "configs"
OVERRIDES = (
    f"executor.extra_args=['--workflow-profile','{TEST_PROFILE}']",
    "executor.retries=0",
    "executor.jobs=8",
    "executor.resources.default.runtime_min=10",
    "executor.resources.default.mem_mb=400",
    "distributed.timeout_s=120",
)
RUN_CEILING_S = 480


@dataclass
class Finished:
    run_dir: Path
    rc: int
    output: str
    env: dict[str, str]


def _env(cluster: MultiNodeCluster) -> dict[str, str]:
    env = dict(cluster.env())
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               # multinode_slow's operator is test code, importable and allowed by the runner
               PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGIN_FIXTURES), env.get("PYTHONPATH")])),
               D5PIPE_ALLOW=TESTING_OPS,
               # the nodes share one kernel: Open MPI must talk TCP over the bridge between them
               OMPI_MCA_btl="self,tcp")
    return env


def _run(cluster: MultiNodeCluster, experiment: str, run_dir: Path, *extra: str) -> Finished:
    env = _env(cluster)
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", experiment, "--config-dir", str(TEST_CONF),
            "--out", str(run_dir), "--executor", "slurm", *OVERRIDES, *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=RUN_CEILING_S,
                          check=False)
    return Finished(run_dir, proc.returncode, proc.stdout + proc.stderr, env)


def _records(run_dir: Path, stage: str) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "points" / stage).glob("*.json")}


def _metrics(rec: dict[str, Any]) -> dict[str, Any]:
    return {m["name"]: m["value"] for m in rec["metrics"]}


def _sacct(env: dict[str, str], *args: str) -> list[dict[str, str]]:
    fields = "JobID,JobIDRaw,JobName,State,NodeList,WorkDir,Start,End"
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", fields, *args], capture_output=True, text=True,
                         env=env, timeout=30, check=True).stdout
    return [dict(zip(fields.split(","), line.split("|"), strict=True)) for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def mn_runs(multinode_cluster: MultiNodeCluster, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Future[Finished]]:
    base = tmp_path_factory.mktemp("multinode")
    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="mn-run")
    started = time.monotonic()
    futures = {
        "l3": pool.submit(_run, multinode_cluster, "multinode_l3", base / "l3"),
        "sweep": pool.submit(_run, multinode_cluster, "multinode_sweep", base / "sweep", "executor.array_throttle=2"),
        "nodes": pool.submit(_run, multinode_cluster, "nodes", base / "nodes"),
    }
    yield futures
    pool.shutdown(wait=True)
    print(f"\nmultinode runs took {time.monotonic() - started:.0f} s "
          f"(cluster start {multinode_cluster.start_seconds:.1f} s)")


def test_level3_runs_across_two_nodes_on_every_engine(mn_runs: dict[str, Future[Finished]]) -> None:
    res = mn_runs["l3"].result(timeout=RUN_CEILING_S + 60)
    assert res.rc == 0, res.output[-4000:]
    recs = _records(res.run_dir, "level3")
    assert {r["params"]["distributed.backend"] for r in recs.values()} == {"ddp", "horovod", "mpi"}
    for rec in recs.values():
        assert rec["status"] == "ok", rec["error"]
        m = _metrics(rec)
        assert m["params_identical"] == "pass" and m["matches_serial"] == "pass", m
        assert m["nodes"] == 2 and m["ranks_per_node"] == 2
        assert len(set(rec["extra"]["nodelist"])) == 2
        argv = rec["extra"]["launch"]["argv"]
        assert argv[0] == "srun" and "--nodes=2" in argv and "--ntasks-per-node=2" in argv
    df = pd.read_parquet(res.run_dir / "results.parquet")
    assert set(df.loc[df["stage"] == "level3", "verdict"]) == {"pass"}


def test_a_stage_of_six_shards_is_one_job_array(mn_runs: dict[str, Future[Finished]]) -> None:
    res = mn_runs["sweep"].result(timeout=RUN_CEILING_S + 60)
    assert res.rc == 0, res.output[-4000:]
    recs = _records(res.run_dir, "level0")
    assert len(recs) == 12 and {r["status"] for r in recs.values()} == {"ok"}
    workdir = os.path.realpath(res.run_dir)
    jobs = [j for j in _sacct(res.env, "-S", "now-1hours") if os.path.realpath(j["WorkDir"] or "/") == workdir]
    shard_tasks = [j for j in jobs if "_" in j["JobID"]]
    assert len(shard_tasks) == 6, jobs
    assert len({j["JobID"].split("_")[0] for j in shard_tasks}) == 1, "one sbatch for the level-0 stage"
    task_ids = {r["provenance"]["slurm_job_id"] for r in recs.values()}
    assert task_ids <= {j["JobIDRaw"] for j in shard_tasks}
    # executor.array_throttle=2: never more than 2 of the 6 tasks running at once (sacct's times
    # have one-second resolution; a task that starts in the second another ends does not overlap)
    spans = [(datetime.fromisoformat(j["Start"]), datetime.fromisoformat(j["End"])) for j in shard_tasks]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 2, sorted(spans)


def test_the_same_point_runs_on_each_of_three_distinct_nodes(mn_runs: dict[str, Future[Finished]]) -> None:
    res = mn_runs["nodes"].result(timeout=RUN_CEILING_S + 60)
    assert res.rc == 0, res.output[-4000:]
    recs = _records(res.run_dir, "level0")
    assert len(recs) == 6 and {r["status"] for r in recs.values()} == {"ok"}
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, env=res.env,
                           timeout=30, check=True).stdout.split()
    names = natsorted(set(nodes))
    for rec in recs.values():  # node k is the k-th node of the partition, and only that one
        assert rec["provenance"]["slurm_nodelist"] == names[rec["params"]["placement.node"] - 1], rec["provenance"]
    per_size = {}
    for rec in recs.values():
        per_size.setdefault(rec["params"]["operators.size"], set()).add(rec["provenance"]["slurm_nodelist"])
    assert all(len(v) == 3 for v in per_size.values())
    report = (res.run_dir / "report.md").read_text()
    assert "Node-to-node variability" in report and "spread between nodes" in report


def test_sacct_accounting_reaches_the_results_and_the_report(mn_runs: dict[str, Future[Finished]]) -> None:
    res = mn_runs["sweep"].result(timeout=RUN_CEILING_S + 60)
    assert res.rc == 0, res.output[-4000:]
    df = pd.read_parquet(res.run_dir / "results.parquet")
    points = df.drop_duplicates("point_id")
    assert set(points["slurm_state"]) == {"COMPLETED"}
    assert (points["slurm_elapsed_s"] > 0).all() and (points["slurm_cpu_s"] >= 0).all()
    assert points["slurm_job_id"].notna().all()
    acct = pd.read_parquet(res.run_dir / "accounting.parquet")
    assert set(points["slurm_job_id"]) <= set(acct["slurm_job_id"])
    assert acct["slurm_cpu_efficiency"].between(0, 1.5).all()
    html = (res.run_dir / "report.html").read_text()
    assert 'id="slurm"' in html and "CPU eff." in html


def _status(env: dict[str, str], run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "status", str(run_dir)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def _wait(what: str, check: Any, ceiling_s: float, step_s: float = 2.0) -> Any:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_detached_driver_survives_the_kill_of_its_submitter(multinode_cluster: MultiNodeCluster,
                                                              tmp_path: Path) -> None:
    env = _env(multinode_cluster)
    run_dir = tmp_path / "detached"
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "multinode_sweep", "--config-dir", str(TEST_CONF),
            "--out", str(run_dir), "--executor", "slurm", *OVERRIDES, "--detach"]
    submitter = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 cwd=ROOT, start_new_session=True)
    out, _ = submitter.communicate(timeout=180)
    assert submitter.returncode == 0, out
    try:
        os.killpg(submitter.pid, 9)  # the login shell goes away: nothing of the run lived there
    except ProcessLookupError:
        pass
    driver = json.loads((run_dir / "driver.json").read_text())["job_id"]
    assert f"SLURM job {driver}" in out
    running = _wait("the driver to run", lambda: "driver: SLURM job" in (s := _status(env, run_dir)).stdout
                    and s.stdout, 120)
    assert f"driver: SLURM job {driver}" in running
    done = _wait("the detached run to pass", lambda: _status(env, run_dir).returncode == 0, RUN_CEILING_S, 5.0)
    assert done
    assert len(_records(run_dir, "level0")) == 12
    state = _wait("sacct to record the driver", lambda: next(
        (j["State"] for j in _sacct(env, "-j", driver) if j["State"] != "RUNNING"), None), 120)
    assert state == "COMPLETED"


def test_cancel_stops_the_driver_and_the_runs_jobs(multinode_cluster: MultiNodeCluster, tmp_path: Path) -> None:
    env = _env(multinode_cluster)
    run_dir = tmp_path / "cancelled"
    r = subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "run", "multinode_slow", "--config-dir",
                        str(TEST_CONF), "--out", str(run_dir), "--executor", "slurm", *OVERRIDES, "--detach"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=180, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    driver = json.loads((run_dir / "driver.json").read_text())["job_id"]
    workdir = os.path.realpath(run_dir)

    def shard_jobs() -> list[dict[str, str]]:
        return [j for j in _sacct(env, "-S", "now-1hours") if os.path.realpath(j["WorkDir"] or "/") == workdir]

    _wait("a shard job to run", lambda: any(j["State"] == "RUNNING" for j in shard_jobs()), 240)
    c = subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "cancel", str(run_dir)], capture_output=True,
                       text=True, env=env, timeout=120, check=False)
    assert c.returncode == 0 and driver in c.stdout, c.stdout + c.stderr
    _wait("every job of the run to end", lambda: shard_jobs() and all(
        j["State"] not in ("RUNNING", "PENDING") for j in shard_jobs()), 120)
    assert {j["State"].split()[0] for j in shard_jobs()} <= {"CANCELLED", "COMPLETED"}
    _wait("the driver to end", lambda: all(j["State"] not in ("RUNNING", "PENDING")
                                           for j in _sacct(env, "-j", driver)), 120)


def test_a_node_killed_mid_run_loses_only_its_jobs_unfinished_points(
        multinode_cluster: MultiNodeCluster, tmp_path: Path) -> None:
    env = _env(multinode_cluster)
    run_dir = tmp_path / "nodefail"
    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(_run, multinode_cluster, "multinode_slow", run_dir, "executor.retries=1")
    victim = "node2"

    def job_on_victim() -> str | None:
        for j in _sacct(env, "-S", "now-1hours"):
            if j["State"] == "RUNNING" and j["NodeList"] == victim and \
                    os.path.realpath(j["WorkDir"] or "/") == os.path.realpath(run_dir):
                return j["JobIDRaw"]
        return None

    try:
        lost = _wait("a shard job on node2", job_on_victim, 300, 1.0)
        _wait("its first point", lambda: len(_records(run_dir, "level0")) >= 1, 120, 1.0)
        multinode_cluster.kill_node(victim)
        res = fut.result(timeout=RUN_CEILING_S + 120)
    finally:
        pool.shutdown(wait=True)
        multinode_cluster.restart_node(victim)
    assert res.rc == 0, res.output[-4000:]
    recs = _records(run_dir, "level0")
    assert len(recs) == 6 and {r["status"] for r in recs.values()} == {"ok"}
    acct = pd.read_parquet(run_dir / "accounting.parquet")
    failed = acct[acct["slurm_job_id"] == lost]
    assert list(failed["slurm_state"]) == ["NODE_FAIL"] and list(failed["slurm_nodes"]) == [victim]
    html = (run_dir / "report.html").read_text()
    assert f"ended NODE_FAIL on {victim}" in html
