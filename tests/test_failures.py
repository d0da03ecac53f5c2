"""Failure injection through real Snakemake runs: sweeps that survive crashes, hangs, kills, stale
locks, corrupt records and hostile paths (docs/reliability.md summarises the outcomes).

Every case asserts that the sweep completes (or resumes), that every planned point has exactly one
valid record, that nothing finished before is recomputed and that the failure is recorded with its
cause.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.conftest import TEST_CONF, TESTING_OPS_ENV, d5pipe

pytestmark = pytest.mark.slow

FAULTS = ["--config-dir", str(TEST_CONF)]
# three points of 1 s each (budget_s=1 with an unreachable CI target): a run long enough to be killed,
# timed out or joined mid-shard; each test runs it once or twice, so its length is most of their time
SLOW_TINY = ["tiny", "--config-dir", str(TEST_CONF), "timer.budget_s=1", "timer.target_ci_pct=0.001",
             "timer.max_samples=100000"]


def records(run: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((run / "points").glob("*/*.json")):
        out[p.name] = json.loads(p.read_text())
    return out


def stamps(run: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (run / "points").glob("*/*.json")}


def shard_log(run: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run / "logs").glob("level*/*.log")))


def run_processes(run: Path) -> list[psutil.Process]:
    """Live processes of a run (Snakemake, its jobs and their workers name the run directory)."""
    key = str(run)
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and key in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_for(cond, ceiling_s: float, step_s: float = 0.1) -> bool:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return cond()


def test_a_point_that_exits_137_fails_alone_with_a_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "faults", *FAULTS, "--out", str(run), env=TESTING_OPS_ENV)
    assert r.returncode == 3, r.stdout + r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert "1 of 4 points did not pass (1 failed)" in summary and "report.html#failures" in summary
    recs = records(run)
    assert sorted(rec["status"] for rec in recs.values()) == ["failed", "ok", "ok", "ok"]
    crashed = next(rec for rec in recs.values() if rec["status"] == "failed")
    assert crashed["params"]["operators.size"] == 32 and crashed["error"] == "crashed: exit 137"
    df = pd.read_parquet(run / "results.parquet")
    assert set(df.loc[df["status"] == "failed", "verdict"]) == {"fail"}
    assert set(df.loc[df["status"] == "ok", "verdict"]) == {"pass"}
    html = (run / "report.html").read_text()
    assert html.index('id="failures"') < html.index('id="level0"') and "crashed: exit 137" in html


def test_fault_matrix_in_one_shard(tmp_path: Path) -> None:
    """Exception, os._exit, SIGSEGV, memory blow-up and a hang past point_timeout_s, one shard."""
    run = tmp_path / "run"
    r = d5pipe("run", "faults", *FAULTS, "--out", str(run),
               "sweep.grid.operators.op=[fault_raise,fault_exit137,fault_segv,fault_oom,fault_hang]",
               "sweep.grid.operators.size=[32,16]", env=TESTING_OPS_ENV)
    assert r.returncode == 3, r.stdout + r.stderr
    by_op = {(rec["params"]["operators.op"], rec["params"]["operators.size"]): rec for rec in records(run).values()}
    assert len(by_op) == 10
    assert by_op[("fault_raise", 32)]["error"] == "RuntimeError: injected failure"
    assert by_op[("fault_exit137", 32)]["error"] == "crashed: exit 137"
    assert by_op[("fault_segv", 32)]["error"] == "crashed: killed by signal 11 (SIGSEGV)"
    assert by_op[("fault_oom", 32)]["error"].startswith("MemoryError")
    assert by_op[("fault_hang", 32)]["error"] == "timeout after 12 s (shards.point_timeout_s)"
    for op in ("fault_raise", "fault_exit137", "fault_segv", "fault_oom", "fault_hang"):
        after = by_op[(op, 16)]
        assert after["status"] == "ok", f"the shard went on after {op}: {after.get('error')!r}\n{shard_log(run)}"


def test_a_point_that_kills_its_shard_job_is_failed_after_max_attempts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["run", "faults", *FAULTS, "--out", str(run), "sweep.grid.operators.op=[fault_kill_shard]",
            "sweep.grid.operators.size=[16,32,40]", "shards.max_attempts=1"]
    first = d5pipe(*args, env=TESTING_OPS_ENV)
    # the points run in a seeded random order: the killer and every point after it never ran
    order = [pt["params"]["operators.size"] for pt in json.loads((run / "plan" / "level0" / "s00000.json")
                                                                  .read_text())["points"]]
    never = len(order) - order.index(32)
    assert first.returncode == 3 and f"{never} never ran" in first.stdout, first.stdout + first.stderr
    assert (run / "report.html").is_file(), "a report even when a shard job died"
    done_first = stamps(run)
    second = d5pipe(*args, env=TESTING_OPS_ENV)
    assert second.returncode == 3, second.stdout + second.stderr
    recs = records(run)
    assert len(recs) == 3
    killer = next(rec for rec in recs.values() if rec["params"]["operators.size"] == 32)
    assert killer["status"] == "failed" and "died with its shard job in 1 start(s)" in killer["error"]
    assert all(stamps(run)[k] == v for k, v in done_first.items()), "finished points were recomputed"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_of_the_driver_leaves_nothing_and_resumes(tmp_path: Path, seed: int) -> None:
    run = tmp_path / "run"
    delay = random.Random(seed).uniform(4.0, 12.0)  # from composing to mid-shard
    proc = subprocess.Popen([sys.executable, "-m", "d5pipe.cli.main", "run", *SLOW_TINY, "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_for(lambda: not run_processes(run), 10.0), [p.cmdline() for p in run_processes(run)]
    before = stamps(run) if (run / "points").exists() else {}
    r = d5pipe("run", *SLOW_TINY, "--out", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    recs = records(run)
    assert len(recs) == 3 and all(rec["status"] == "ok" for rec in recs.values())
    assert all(stamps(run)[k] == v for k, v in before.items()), "finished points were recomputed"
    df = pd.read_parquet(run / "results.parquet")
    assert not df.duplicated(["stage", "point_id", "metric"]).any()


def test_timeout_then_resume_without_a_manual_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", *SLOW_TINY, "--out", str(run), "--timeout", "8")
    assert r.returncode == 124 and "--timeout" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert wait_for(lambda: not run_processes(run), 10.0)
    again = d5pipe("run", *SLOW_TINY, "--out", str(run))
    assert again.returncode == 0, again.stdout + again.stderr


def test_two_concurrent_runs_into_one_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "d5pipe.cli.main", "run", *SLOW_TINY, "--out", str(run)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (run / ".d5pipe.lock").exists() and run_processes(run), 120)
        second = d5pipe("run", *SLOW_TINY, "--out", str(run))
        assert second.returncode == 2
        assert f"in use by a running d5pipe, PID {first.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out + err
    assert len(records(run)) == 3


def test_a_corrupt_record_is_recomputed_alone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert d5pipe("run", "tiny", *FAULTS, "--out", str(run)).returncode == 0
    before = stamps(run)
    victim = sorted(before)[1]
    path = next((run / "points").glob(f"*/{victim}"))
    path.write_text('{"schema_version": 1, "status": "ok", "metri')  # torn by some other tool
    r = d5pipe("run", "tiny", *FAULTS, "--out", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    after = stamps(run)
    assert {k for k in after if after[k] != before[k]} == {victim}
    assert json.loads(path.read_text())["status"] == "ok"


def test_hostile_names_and_run_directories(tmp_path: Path) -> None:
    escaped = d5pipe("plan", "tiny", *FAULTS, "name=../../escaped")
    assert escaped.returncode == 2 and "key 'name'" in escaped.stderr
    spaced = d5pipe("plan", "tiny", *FAULTS, "name='a b;c'")
    assert spaced.returncode == 2 and "key 'name'" in spaced.stderr
    a_file = tmp_path / "file"
    a_file.write_text("x")
    r = d5pipe("run", "tiny", *FAULTS, "--out", str(a_file))
    assert r.returncode == 2 and "not a directory" in r.stderr and "Traceback" not in r.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() != 0:  # root writes anywhere; the check then is the file case above
        r = d5pipe("run", "tiny", *FAULTS, "--out", str(ro / "run"))
        assert r.returncode == 2 and "not writable" in r.stderr
    run = tmp_path / "run"
    assert d5pipe("run", "tiny", *FAULTS, "--out", str(run)).returncode == 0
    other = d5pipe("run", "faults", *FAULTS, "--out", str(run), env=TESTING_OPS_ENV)
    assert other.returncode == 2 and "belongs to experiment 'tiny'" in other.stderr
    assert json.loads((run / "manifest.json").read_text())["experiment"] == "tiny"  # untouched
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    r = d5pipe("run", "tiny", *FAULTS, "--out", str(junk))
    assert r.returncode == 2 and "not a d5pipe run directory" in r.stderr
    r = d5pipe("bundle", str(junk))
    assert r.returncode == 2 and "not a d5pipe run directory" in r.stderr
    fake = tmp_path / "fake.tar.gz"
    subprocess.run(["tar", "-czf", str(fake), "-C", str(junk), "notes.txt"], check=True)
    r = d5pipe("reproduce", str(fake), "--out", str(tmp_path / "rr"))
    assert r.returncode == 2 and "not a d5pipe bundle" in r.stderr and "Traceback" not in r.stderr
