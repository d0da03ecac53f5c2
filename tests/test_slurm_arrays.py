"""Stages wider than ``--jobs`` under SLURM job arrays, on the real one-node test cluster.

snakemake-executor-plugin-slurm 2.8.0 drops a rule's batch of ready jobs that is smaller than the
rule's ready count (upstream #473), and those jobs never reach SLURM: a stage with more shards
than ``--jobs`` used to hang with nothing queued. d5pipe hands Snakemake every job at once and
throttles the arrays in SLURM instead (d5pipe.execute.slurm_arrays); a watchdog stops a run whose
pending shards SLURM does not hold (d5pipe.execute.slurm_watchdog). Two runs, side by side:

* ``wide``: 12 one-point shards (3 x ``--jobs 4``), the shipped profile with the test profile's
  fast status polling (first query after 3 s, not 40 s: the shipped polling alone made this run
  take 3.5 min; test_slurm_pipeline runs the shipped profile as it is): every point once, one
  array, never more than 4 tasks running at once;
* ``dropped``: a stub ``sbatch`` first on PATH passes the first array to SLURM and answers the
  second with a job ID it never submits: the run stops with exit 75 and one line naming the
  missing shards, keeps what ran, and a plain re-run completes without redoing a point.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from d5pipe.execute.slurm import cancel_run_jobs
from slurm_fixture import TEST_PROFILE, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
TEST_CONF = ROOT / "tests" / "configs"
JOBS = 4
SHARDS = 12  # slurm_wide: 12 sizes x 1 batch, one point per shard
SHIPPED = ("executor.resources.default.runtime_min=10", "executor.resources.default.mem_mb=256",
           "executor.retries=0")
WATCHDOG_S = 15

STUB_SBATCH = """#!/bin/bash
# Test stub: hands every call to the real sbatch, except the second job array, which it answers
# with a job ID (as sbatch --parsable does) without submitting anything.
count_file={count}
case " $* " in
  *" --array="*)
    n=$(( $(cat "$count_file" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$count_file"
    if [ "$n" -eq 2 ]; then cat >/dev/null; echo 990000; exit 0; fi;;
esac
exec {real} "$@"
"""


@dataclass
class Outcome:
    rc: int
    output: str
    ended: datetime


def _env(cluster: SlurmCluster, path_first: Path | None = None) -> dict[str, str]:
    env = dict(cluster.env())
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(env: dict[str, str], run_dir: Path, *overrides: str, timeout_s: float = 600) -> Outcome:
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "slurm_wide", "--config-dir", str(TEST_CONF),
            "--out", str(run_dir), "--executor", "slurm", "--jobs", str(JOBS), *SHIPPED, *overrides]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        cancel_run_jobs(run_dir, env=env)
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"{run_dir.name}: no exit within {timeout_s} s:\n{out[-3000:]}") from None
    return Outcome(proc.returncode, proc.stdout + proc.stderr, datetime.now())


def _mtimes(run_dir: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in (run_dir / "points" / "level0").glob("*.json")}


def _attempts(run_dir: Path) -> list[str]:
    """Every point a shard started, over all runs (shards/<stage>/<shard>.attempts, append-only)."""
    lines: list[str] = []
    for path in (run_dir / "shards" / "level0").glob("*.attempts"):
        lines += [ln for ln in path.read_text().splitlines() if ln.strip()]
    return lines


def wide(cluster: SlurmCluster, run_dir: Path) -> Outcome:
    return _run(_env(cluster), run_dir, f"executor.extra_args=['--workflow-profile','{TEST_PROFILE}']")


@dataclass
class Dropped:
    first: Outcome
    kept: dict[str, int]
    unmarked: set[str]
    second: Outcome
    after: dict[str, int]
    arrays_seen_by_stub: int


def dropped(cluster: SlurmCluster, run_dir: Path) -> Dropped:
    stub_dir = run_dir.parent / "stub_bin"
    stub_dir.mkdir(parents=True)
    real = subprocess.run(["bash", "-c", "command -v sbatch"], capture_output=True, text=True, check=True,
                          env=_env(cluster)).stdout.strip()
    stub = stub_dir / "sbatch"
    stub.write_text(STUB_SBATCH.format(count=stub_dir / "arrays", real=real))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    # two arrays of 6 (array_limit), the test profile's fast polling, a 15 s watchdog
    settings = ("executor.array_limit=6", f"executor.watchdog_s={WATCHDOG_S}",
                f"executor.extra_args=['--workflow-profile','{TEST_PROFILE}']")
    first = _run(_env(cluster, stub_dir), run_dir, *settings)
    kept = _mtimes(run_dir)
    plan = json.loads((run_dir / "plan" / "index.json").read_text())
    unmarked = {name for name in plan["stages"]["level0"]["shards"]
                if not (run_dir / "shards" / "level0" / f"{name}.json").exists()}
    seen = int((stub_dir / "arrays").read_text())
    second = _run(_env(cluster), run_dir, *settings)
    return Dropped(first, kept, unmarked, second, _mtimes(run_dir), seen)


@pytest.fixture(scope="module")
def runs(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Future[Any]]]:
    base = tmp_path_factory.mktemp("slurm_arrays")
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="slurm-arrays")
    futures: dict[str, Future[Any]] = {
        "wide": pool.submit(wide, slurm_cluster, base / "wide" / "run"),
        "dropped": pool.submit(dropped, slurm_cluster, base / "dropped" / "run"),
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    for run_dir in base.glob("*/run"):
        cancel_run_jobs(run_dir, env=_env(slurm_cluster))


def _records(cluster: SlurmCluster, run_dir: Path) -> list[dict[str, str]]:
    """SLURM's completion records of the jobs that ran in ``run_dir``."""
    return [r for r in cluster.jobcomp_records()
            if os.path.realpath(r.get("WorkDir", "")) == os.path.realpath(run_dir)]


def _max_running(records: list[dict[str, str]]) -> int:
    spans = [(datetime.fromisoformat(r["StartTime"]), datetime.fromisoformat(r["EndTime"])) for r in records]
    return max(sum(1 for s2, e2 in spans if s2 <= s < e2) for s, _ in spans)


def test_a_stage_of_three_times_jobs_shards_completes_every_point_once_as_one_array(
        runs: dict[str, Future[Any]], slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    res: Outcome = runs["wide"].result(timeout=840)
    run_dir = next(tmp_path_factory.getbasetemp().glob("slurm_arrays*/wide/run"))
    assert res.rc == 0, res.output[-4000:]
    points = _mtimes(run_dir)
    assert len(points) == SHARDS
    attempts = _attempts(run_dir)
    assert len(attempts) == SHARDS and len(set(attempts)) == SHARDS, attempts  # each point ran once
    log = (run_dir / "logs" / "snakemake.log").read_text()
    submitted = [line for line in log.splitlines() if "Submitted array job with Snakemake IDs" in line]
    assert len(submitted) == 1, submitted  # the whole stage in one sbatch, as `d5pipe plan` says
    assert len(submitted[0].split("IDs ")[1].split(" and")[0].split(",")) == SHARDS
    records = _records(slurm_cluster, run_dir)
    assert len(records) == SHARDS and all(r["JobState"] == "COMPLETED" for r in records)
    assert _max_running(records) <= JOBS  # ArrayTaskThrottle = --jobs


def test_a_dropped_submission_stops_the_run_with_one_line_and_a_re_run_completes(
        runs: dict[str, Future[Any]], slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    res: Dropped = runs["dropped"].result(timeout=840)
    run_dir = next(tmp_path_factory.getbasetemp().glob("slurm_arrays*/dropped/run"))
    assert res.arrays_seen_by_stub == 2  # the stage went out as two arrays; the stub ate the second
    assert res.first.rc == 75, res.first.output[-4000:]
    [line] = [ln for ln in res.first.output.splitlines() if "no job of this run in SLURM and no progress" in ln]
    assert line.startswith("d5pipe: error: executor slurm:") and "run the same command again" in line
    assert "6 shard(s) are pending" in line and "990000_" in line
    named = {part.strip().split()[-1] for part in line.split("lost by SLURM: ")[1].split(";")[0].split(",")}
    assert named == res.unmarked and len(named) == 6  # the shards that never ran are the ones named
    assert len(res.kept) == 6  # what ran is kept
    # stopped within the watchdog's bound after the real array's last task ended (+ its 10 s poll,
    # the plugin's latency and the results; a generous ceiling)
    ended = max(datetime.fromisoformat(r["EndTime"]) for r in _records(slurm_cluster, run_dir))
    assert (res.first.ended - ended).total_seconds() < WATCHDOG_S + 120
    assert (run_dir / "results.parquet").exists() and (run_dir / "report.html").exists()
    assert res.second.rc == 0, res.second.output[-4000:]
    assert len(res.after) == SHARDS
    assert all(res.after[pid] == mtime for pid, mtime in res.kept.items())  # nothing redone
    assert sorted(_attempts(run_dir)) == sorted(set(_attempts(run_dir)))
