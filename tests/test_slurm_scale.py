"""A sweep wider than the site allows at once, on a 16-node sandbox with the limits lowered on purpose.

The sandbox (scripts/slurm_sandbox.py's cluster) has ``MaxArraySize=11`` (array indices 0..10) and
``MaxJobCount=40`` (every task in slurmctld, finished ones for ``MinJobAge``). One run of two array
stages -- 90 one-point level-0 shards and 10 one-point level-2 shards of a tiny MLP (100 shards:
150 took 7.5 min on 2 cores, too long for ``make test``; the requeued task waits the sandbox's
``cred_expire``, 30 s, where Slurm's default would idle the run for 120 s) -- under
``--jobs 6``, while two nodes (of 16) are set DOWN and a running task is requeued mid-run:

* arrays are chunked and numbered from 1: no task index above 10, no rejected ``sbatch``;
* the sweep goes out in waves (d5pipe's executor says it waits for ``MaxJobCount``);
* the run-wide limit holds across both stages, per sacct's start and end times;
* every planned point has exactly one record, and no point was started more than twice (a point
  killed by the requeue or a DOWN node starts again; the others once).

Every SLURM client command is wrapped on PATH (the shim of benchmarks/bench_slurm_scale.py) so that
the test sees each ``sbatch``'s arguments and exit code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from benchmarks import bench_slurm_scale as bench

from d5pipe.rundir.layout import RunDir

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[1]
NODES = 16
LIMITS = {"max_array_size": 11, "max_job_count": 40, "min_job_age": 10}
JOBS = 6
LEVEL0_SHARDS, LEVEL2_SHARDS = 90, 10

EXPERIMENT = f"""# @package _global_
name: slurm_scale
seed: 3
repetitions: 1
stages: [level0, level2]
shards: {{points_per_shard: 1, max_jobs_per_stage: 0}}
timer: {{budget_s: 0.01, min_samples: 3, warmup_max_iters: 1}}
operators: {{op: sum, peak: false, check_correctness: false, check_backward: false, time_backward: false}}
model: {{name: mlp, hidden: [8]}}
dataset: {{name: synthetic, n_samples: 64, image_shape: [], n_features: 8, n_classes: 2}}
train: {{peak: false, optimizer: sgd, lr: 0.05, epochs: 1, batch_size: 32, target_accuracy: null}}
sweep:
  grid:
    operators.size: {list(range(1, LEVEL0_SHARDS + 1))}
    train.lr: {[round(0.01 * (k + 1), 3) for k in range(LEVEL2_SHARDS)]}
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from multinode_fixture import _ensure_installed, multinode_module
    from tests.slurm_fixture import stop_single_node_cluster

    _ensure_installed()
    stop_single_node_cluster()  # the plugin's job steps read /etc/slurm/slurm.conf
    settings = multinode_module.Settings(n_nodes=NODES, cpus_per_node=2, real_memory_mb=1024, **LIMITS)
    cluster = multinode_module.MultiNodeCluster(tmp_path_factory.mktemp("sandbox16"), settings=settings)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _faults(cluster: Any, run_dir: Path, stop: threading.Event, did: list[str]) -> None:
    """Once 20 level-0 records exist: two nodes DOWN, slurmctld restarted, then one running array
    task requeued."""
    records = run_dir / "points" / "level0"
    while not stop.is_set() and len(list(records.glob("*.json"))) < 20:
        time.sleep(1)
    if stop.is_set():
        return
    cluster.set_down(["node15", "node16"], reason="test: 10% of nodes down")
    did.append("down")
    cluster.restart_controller()
    did.append("controller restarted")
    deadline = time.monotonic() + 120
    while not stop.is_set() and time.monotonic() < deadline:
        out = cluster.run(["squeue", "-h", "-r", "-t", "R", "-o", "%i"]).stdout.split()
        tasks = [t for t in out if "_" in t]
        if tasks and cluster.run(["scontrol", "requeue", tasks[0]]).returncode == 0:
            did.append(f"requeue {tasks[0]}")
            return
        time.sleep(0.5)


def _concurrency(rows: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in rows] + [(e, -1) for _, e in rows])
    most = cur = 0
    for _, step in events:
        cur += step
        most = max(most, cur)
    return most


def _sacct_intervals(cluster: Any, run_dir: Path) -> list[tuple[float, float]]:
    out = cluster.run(["sacct", "-n", "-P", "-X", "-a", "-S", "now-2hours", "-o", "JobID,Start,End,WorkDir,State"],
                      timeout_s=60).stdout
    rows = []
    for line in out.splitlines():
        job, start, end, workdir, state = (line.split("|") + [""] * 5)[:5]
        if os.path.realpath(workdir) != os.path.realpath(run_dir) or "Unknown" in (start, end) or not start:
            continue
        if state.startswith("PENDING"):
            continue
        rows.append((datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp()))
    return rows


def test_a_sweep_wider_than_the_site_allows_runs_in_chunked_arrays_and_waves_through_faults(
        sandbox: Any, tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "slurm_scale.yaml").write_text(EXPERIMENT)
    bench.write_shims(tmp_path / "bin")
    calls_log = tmp_path / "calls.log"
    env = {**sandbox.env(), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "D5_CALLS_LOG": str(calls_log),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "slurm_scale", "--config-dir", str(conf), "--out",
            str(run_dir), "--executor", "slurm", "--jobs", str(JOBS), "executor.resources.default.runtime_min=20",
            "executor.resources.default.mem_mb=100", "executor.retries=0", "executor.poll_s=3",
            "executor.extra_args=['--slurm-init-seconds-before-status-checks','5']"]
    stop, did = threading.Event(), []
    faults = threading.Thread(target=_faults, args=(sandbox, run_dir, stop, did), daemon=True)
    faults.start()
    try:
        first = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    finally:
        stop.set()
        faults.join(30)
    runs = [first]
    if first.returncode == 75:  # stopped on a lost job: a plain re-run completes
        runs.append(subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False))
    last = runs[-1]
    assert last.returncode == 0, f"{did}\n{first.stdout[-3000:]}{first.stderr[-2000:]}\n{last.stdout[-2000:]}"
    assert "down" in did and any(d.startswith("requeue") for d in did), did

    calls = bench.read_calls(calls_log)
    sbatch = [c for c in calls if c["cmd"] == "sbatch"]
    assert sbatch and all(c["rc"] == 0 for c in sbatch), [c for c in sbatch if c["rc"]]
    indices = [int(a.split("=", 1)[1].split("-")[1].split("%")[0]) for c in sbatch for a in c["args"].split()
               if a.startswith("--array=")]
    assert indices and max(indices) <= LIMITS["max_array_size"] - 1
    assert len(indices) >= (LEVEL0_SHARDS + LEVEL2_SHARDS) // 10  # chunks of at most 10 tasks
    log = (run_dir / "logs" / "snakemake.log").read_text()
    assert "waiting to submit" in log and "MaxJobCount=40" in log

    rd = RunDir(run_dir)
    planned = {pid for ids in rd.planned_ids.values() for pid in ids}
    recorded = {p.stem for stage in ("level0", "level2") for p in (run_dir / "points" / stage).glob("*.json")}
    assert recorded == planned and len(planned) == LEVEL0_SHARDS + LEVEL2_SHARDS
    started: Counter[str] = Counter()
    for path in (run_dir / "shards").glob("*/*.attempts"):
        started.update(line.strip() for line in path.read_text().splitlines() if line.strip())
    assert set(started) == planned and max(started.values()) <= 2, started.most_common(3)

    status = subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "status", str(run_dir)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300, check=False).stdout
    happened = status[status.index("slurm: "):]  # what happened, from sacctmgr's events and sacct --duplicates
    # a DOWN node is the run's incident when one of its jobs ran there (SLURM packs jobs onto the first
    # nodes, so node15 and node16 mostly ran none: then their episode is left out)
    from d5pipe.results.slurm_incidents import used_nodes

    used = used_nodes(pd.read_parquet(run_dir / "accounting.parquet")) or set()
    for node in ("node15", "node16"):
        assert (f"{node} DOWN" in happened) == (node in used), (node, used, status)
    assert re.search(r"ran \d+ times: [^\n]*REQUEUED on node", happened), status  # the task requeued by hand
    assert re.search(r"submission\(s\) waited, \d+ s in all, for: ", happened), status

    intervals = _sacct_intervals(sandbox, run_dir)
    assert len(intervals) >= LEVEL0_SHARDS + LEVEL2_SHARDS
    assert _concurrency(intervals) <= JOBS
