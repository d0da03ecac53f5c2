"""A shard killed with SIGKILL mid-run resumes without redoing finished points or corrupt records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from d5pipe.config.compose import compose_config, to_plain
from d5pipe.plan.build import build_plan
from d5pipe.rundir.plan_files import write_plan
from tests.conftest import TEST_CONF

pytestmark = pytest.mark.slow


def _records(run: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for p in (run / "points" / "level0").glob("*"):
        out[p.name] = (p.stat().st_mtime_ns, p.read_text())
    return out


def test_sigkill_mid_shard_then_resume(tmp_path: Path) -> None:
    cfg = compose_config(
        "tiny",
        ["shards.points_per_shard=6", "timer.budget_s=0.4", "timer.min_samples=200",
         "sweep.grid={operators.size:[16,24,32,40,48,56]}"],
        [TEST_CONF],
    )
    plan = build_plan(to_plain(cfg))
    assert plan.stages["level0"].n_shards == 1
    run = tmp_path / "run"
    write_plan(run, plan, [])
    cmd = [sys.executable, "-m", "d5pipe.execute.shard", str(run), "level0", "s00000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((run / "points" / "level0").glob("*.json"))) < 2:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _records(run)
    finished = {k for k in first if k.endswith(".json")}
    assert 2 <= len(finished) < 6, "the kill must land mid-shard"
    for name, (_, text) in first.items():
        assert name.endswith(".json"), f"leftover temp file {name}"
        assert json.loads(text)["status"] == "ok"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    second = _records(run)
    assert len(second) == 6
    for name in finished:
        assert second[name] == first[name], f"{name} was recomputed"
    assert r.stdout.count("done before, skipped") == len(finished)
