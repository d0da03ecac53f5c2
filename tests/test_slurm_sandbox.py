"""scripts/slurm_sandbox.py as a user runs it: a 16-node cluster with site limits lowered on
purpose, every fault command once, and a ``down`` that leaves nothing behind.

Only one multi-node cluster runs on a machine at a time (bridge d5br0): the test brings its own
up and down before the session's 3-node cluster starts (tests/conftest.py runs the tests that use
that fixture last). It leaves /etc/slurm/slurm.conf alone (no ``--install-etc-conf``).
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from multinode_fixture import ROOT, _ensure_installed, multinode_module

SCRIPT = ROOT / "scripts" / "slurm_sandbox.py"
ETC_CONF = Path("/etc/slurm/slurm.conf")


def sandbox(*args: str | Path, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _wait(probe: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.mark.parametrize("args", [
    ("up", "{d}", "--nodes", "0"),
    ("up", "{d}", "--nodes", "245"),
    ("up", "{d}", "--nodes", "4", "--max-array-size", "many"),
    ("up", "{d}"),
    ("kill-node", "{d}", "node1"),  # no sandbox under {d}
    ("nonsense", "{d}"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    proc = sandbox(*(a.format(d=tmp_path / "sb") for a in args), timeout_s=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("slurm_sandbox.py")
    assert not (tmp_path / "sb").exists()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sixteen_nodes_with_site_limits_survive_every_fault_and_go_away(tmp_path: Path) -> None:
    _ensure_installed()
    state = tmp_path / "sb"
    etc_before = ETC_CONF.read_bytes() if ETC_CONF.exists() else None
    up = sandbox("up", state, "--nodes", "16", "--max-array-size", "11", "--max-job-count", "40",
                 "--max-submit-jobs", "30")
    try:
        _ok(up)
        assert re.search(r"16 nodes up in [\d.]+ s", up.stderr), up.stderr
        assert (ETC_CONF.read_bytes() if ETC_CONF.exists() else None) == etc_before
        exports = _ok(sandbox("env", state))
        match = re.search(r"^export SLURM_CONF=(\S+)$", exports, re.M)
        assert match and Path(match.group(1)) == state / "etc" / "slurm.conf"
        assert "partition: debug" in exports and "export OMPI_MCA_btl=self,tcp" in exports
        env = {**os.environ, "SLURM_CONF": match.group(1)}

        def slurm(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(list(argv), env=env, capture_output=True, text=True,
                                  timeout=60, check=False)

        def node_state(name: str) -> str:
            return slurm("sinfo", "-h", "-N", "-n", name, "-o", "%T").stdout.strip()

        def job_state(job: str) -> str:
            return slurm("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()

        def sbatch(*args: str) -> str:
            return _ok(slurm("sbatch", "--parsable", "-o", "/dev/null", *args)).strip()

        states = slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout.split()
        assert dict(zip(states[::2], states[1::2])) == {f"node{k}": "idle" for k in range(1, 17)}

        # the site limits: in slurm.conf, and on the user's association
        config = _ok(slurm("scontrol", "show", "config"))
        assert re.search(r"^MaxArraySize\s+=\s+11$", config, re.M)
        assert re.search(r"^MaxJobCount\s+=\s+40$", config, re.M)
        assert re.search(r"^MinJobAge\s+=\s+600 sec$", config, re.M)
        assert re.search(r"^AccountingStorageEnforce\s+=\s+\S*limits", config, re.M)
        rejected = slurm("sbatch", "-o", "/dev/null", "--array=0-11", "--wrap", "true")
        assert rejected.returncode != 0 and "array" in rejected.stderr.lower(), rejected
        sbatch("--array=0-10", "--wrap", "true")  # index 10 < MaxArraySize
        assoc = _ok(slurm("sacctmgr", "-n", "-P", "show", "assoc", "format=user,maxsubmit"))
        assert f"{getpass.getuser()}|30" in assoc.splitlines()

        # set-down: DOWN, and it stays so (an admin's DOWN does not return by itself)
        _ok(sandbox("set-down", state, "node16", "--reason", "test"))
        assert node_state("node16") == "down"
        time.sleep(3)
        assert node_state("node16") == "down"
        _ok(sandbox("restart-node", state, "node16"))
        assert node_state("node16") == "idle"

        # kill-node: the job on it ends NODE_FAIL; restart-node brings the node back
        doomed = sbatch("-w", "node15", "--wrap", "sleep 600")
        _wait(lambda: job_state(doomed) == "RUNNING", f"job {doomed} running")
        _ok(sandbox("kill-node", state, "node15"))
        _wait(lambda: slurm("sacct", "-n", "-X", "-j", doomed, "-o", "State").stdout.strip()
              == "NODE_FAIL", f"job {doomed} NODE_FAIL")
        _ok(sandbox("restart-node", state, "node15"))
        assert node_state("node15") == "idle"

        # restart-controller: a running and a pending job are still there, in the same state
        running = sbatch("-w", "node14", "--wrap", "sleep 600")
        pending = sbatch("--hold", "--wrap", "true")
        _wait(lambda: job_state(running) == "RUNNING", f"job {running} running")
        assert job_state(pending) == "PENDING"
        restarted = _ok(sandbox("restart-controller", state))
        assert restarted == ""
        assert (job_state(running), job_state(pending)) == ("RUNNING", "PENDING")

        # stop-dbd / start-dbd: sacct fails meanwhile, and sees the jobs again after
        _ok(sandbox("stop-dbd", state))
        assert slurm("sacct", "-n", "-X", "-j", running).returncode != 0
        _ok(sandbox("start-dbd", state))
        _wait(lambda: "RUNNING" in slurm("sacct", "-n", "-X", "-j", running, "-o", "State").stdout,
              f"sacct sees job {running}")

        status = sandbox("status", state)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "slurmd     16/16 running" in status.stdout
    finally:
        down = sandbox("down", state)
    _ok(down)
    cluster = multinode_module.MultiNodeCluster.attach(state)
    assert cluster.leftover_processes() == []
    assert cluster.network.leftovers() == []
    assert not multinode_module.RECORD.exists()
    assert (ETC_CONF.read_bytes() if ETC_CONF.exists() else None) == etc_before
    assert sandbox("status", state).returncode == 1  # nothing runs
