"""The multi-node SLURM test cluster: nodes in network namespaces, PMIx across them, sacct,
a node dying mid-job, and a stop that leaves nothing behind.

Run with ``pytest -p tests.multinode_fixture tests/test_multinode_cluster.py`` (or register the
plugin in conftest.py). Every wait polls the cluster with a generous ceiling; nothing asserts
on wall time, so a busy 2-core machine only makes the tests slower.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from multinode_fixture import ROOT, MultiNodeCluster, multinode_module

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300)]

netns = multinode_module.netns
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
MPI_CODE = (
    "from mpi4py import MPI; import socket; import numpy as np; comm = MPI.COMM_WORLD; "
    "total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM); "
    "big = np.full(1 << 20, comm.Get_rank() + 1.0); out = np.empty_like(big); "
    "comm.Allreduce(big, out); ok = bool((out == total).all()); "
    "print(comm.Get_rank(), comm.Get_size(), total, ok, socket.gethostname(), flush=True)"
)


def _srun(cluster: MultiNodeCluster, *args: str, env: dict[str, str] | None = None,
          timeout_s: float = 120.0) -> list[str]:
    proc = subprocess.run(["srun", *args], env=env or cluster.env(), capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    assert proc.returncode == 0, f"srun {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.splitlines()


def _sbatch(cluster: MultiNodeCluster, cwd: Path, *args: str) -> str:
    proc = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=cluster.env(),
                          capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.strip().split(";")[0]


def _squeue_state(cluster: MultiNodeCluster, job_id: str) -> str:
    return str(cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip())


def _node_state(cluster: MultiNodeCluster, name: str) -> str:
    out = cluster.run(["scontrol", "-o", "show", "node", name]).stdout
    match = re.search(r"\bState=(\S+)", out)
    return match.group(1) if match else ""


def _wait_all_idle(cluster: MultiNodeCluster) -> dict[str, str]:
    states: dict[str, str] = cluster.wait_for(
        lambda: (s := cluster.node_states()) and set(s.values()) == {"idle"} and s,
        "all nodes idle")
    return states


def _comms(ns: str) -> set[str]:
    """Command names of the processes in network namespace ``ns``."""
    names = set()
    for pid in netns.netns_pids(ns):
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            pass
    return names


def _cpu_seconds(text: str) -> float:
    """sacct's TotalCPU: ``[DD-][HH:]MM:SS[.mmm]``."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    seconds = sum(v * 60 ** i for i, v in enumerate(reversed(parts)))
    return float(seconds + (int(days) * 86400 if days else 0))


def _rss_bytes(text: str) -> float:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    match = re.fullmatch(r"([\d.]+)([KMG]?)", text)
    assert match, f"MaxRSS {text!r}"
    return float(match.group(1)) * units[match.group(2)]


def test_sinfo_shows_three_idle_nodes(multinode_cluster: MultiNodeCluster) -> None:
    assert multinode_cluster.node_names == ["node1", "node2", "node3"]
    assert multinode_cluster.start_seconds is not None and multinode_cluster.start_seconds > 0
    assert _wait_all_idle(multinode_cluster) == {n: "idle" for n in multinode_cluster.node_names}
    rows = multinode_cluster.run(["sinfo", "-h", "-N", "-o", "%N %c %T"]).stdout.split("\n")
    assert sorted(r for r in rows if r) == [f"{n} 2 idle" for n in multinode_cluster.node_names]
    conf = multinode_cluster.conf.read_text()
    for name, addr in multinode_cluster.node_addrs.items():
        assert f"NodeName={name} NodeAddr={addr} " in conf


def test_srun_on_three_nodes_runs_under_three_hostnames(multinode_cluster: MultiNodeCluster) -> None:
    _wait_all_idle(multinode_cluster)
    assert sorted(_srun(multinode_cluster, "-N3", "hostname")) == ["node1", "node2", "node3"]


def test_each_node_has_its_own_address_and_resolves_the_others(
        multinode_cluster: MultiNodeCluster) -> None:
    _wait_all_idle(multinode_cluster)
    lines = _srun(multinode_cluster, "-N3", "sh", "-c",
                  'echo "$(hostname) $(ip -4 -o addr show dev eth0)"')
    seen = {}
    for line in lines:
        match = re.search(r"inet (10\.77\.0\.\d+)/24", line)
        assert match, line
        seen[line.split()[0]] = match.group(1)
    assert seen == {"node1": "10.77.0.11", "node2": "10.77.0.12", "node3": "10.77.0.13"}
    # programs inside jobs resolve the node names (/etc/hosts while the cluster runs)
    resolved = _srun(multinode_cluster, "-N1", "-w", "node3", "getent", "hosts", "node1", "node2")
    assert sorted(line.split()[:2] for line in resolved) == [["10.77.0.11", "node1"],
                                                              ["10.77.0.12", "node2"]]


def test_mpi4py_allreduce_on_two_nodes_through_srun_pmix(
        multinode_cluster: MultiNodeCluster) -> None:
    assert multinode_cluster.pmix_plugin_available(), (
        f"srun --mpi=pmix unusable: {multinode_module.PMIX_LIB} missing (libpmix-dev); "
        "run tests/cluster/install.sh")
    assert VENV_PYTHON.exists(), f"{VENV_PYTHON} missing (make install-test)"
    _wait_all_idle(multinode_cluster)
    env = {**multinode_cluster.env(),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           # ranks talk TCP over the bridge (node1 and node2 share no memory as far as MPI knows)
           "OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "10.77.0.0/24",
           "PATH": f"{VENV_PYTHON.parent}:{multinode_cluster.env().get('PATH', '')}"}
    lines = _srun(multinode_cluster, "--mpi=pmix", "-N2", "-n4", str(VENV_PYTHON), "-c",
                  MPI_CODE, env=env, timeout_s=180)
    rows = sorted(line.split() for line in lines)
    assert [r[0] for r in rows] == ["0", "1", "2", "3"], lines
    # 1+2+3+4 on every rank, also elementwise over an 8 MiB buffer
    assert all(r[1] == "4" and r[2] == "10" and r[3] == "True" for r in rows), lines
    hosts = [r[4] for r in rows]
    assert len(set(hosts)) == 2 and set(hosts) <= set(multinode_cluster.node_names)
    assert sorted(hosts.count(h) for h in set(hosts)) == [2, 2]


def test_sacct_reports_a_finished_job(multinode_cluster: MultiNodeCluster, tmp_path: Path) -> None:
    _wait_all_idle(multinode_cluster)
    burn = ("import time; b = b'x' * (64 << 20); t = time.process_time()\n"
            "while time.process_time() - t < 3: pass")
    job_id = _sbatch(multinode_cluster, tmp_path, "-N2", "-o", "job.out", "--wrap",
                     f"srun {sys.executable} -c \"{burn}\"")
    rows = multinode_cluster.wait_for(
        lambda: (r := {row["JobID"]: row for row in multinode_cluster.sacct(job_id)})
        and r.get(job_id, {}).get("State") == "COMPLETED"
        and r.get(f"{job_id}.0", {}).get("State") == "COMPLETED" and r,
        f"sacct shows job {job_id} COMPLETED")
    job, step = rows[job_id], rows[f"{job_id}.0"]
    assert job["ExitCode"] == "0:0" and job["NodeList"] == "node[1-2]"
    assert re.fullmatch(r"\d\d:\d\d:\d\d", job["Elapsed"]) and job["Elapsed"] >= "00:00:03"
    assert _cpu_seconds(step["TotalCPU"]) >= 4.0  # two tasks, 3 s of CPU each
    assert _rss_bytes(step["MaxRSS"]) >= 32 << 20  # each task held 64 MiB
    proc = subprocess.run(["sacct", "-j", job_id, "--format=JobID,State,Elapsed,TotalCPU,MaxRSS",
                           "-P"], env=multinode_cluster.env(), capture_output=True, text=True,
                          timeout=30, check=True)
    assert proc.stdout.splitlines()[0] == "JobID|State|Elapsed|TotalCPU|MaxRSS"
    assert f"{job_id}|COMPLETED|" in proc.stdout


def test_a_killed_node_goes_down_and_its_job_stops_running(multinode_cluster: MultiNodeCluster,
                                                           tmp_path: Path) -> None:
    cluster = multinode_cluster
    _wait_all_idle(cluster)
    job_id = _sbatch(cluster, tmp_path, "-w", "node2", "-o", "/dev/null", "--wrap", "sleep 600")
    cluster.wait_for(lambda: _squeue_state(cluster, job_id) == "RUNNING", f"job {job_id} running")
    ns = cluster.network.node("node2").netns
    comms = cluster.wait_for(lambda: "sleep" in (c := _comms(ns)) and c, "the job's sleep")
    assert {"slurmd", "slurmstepd"} <= comms
    try:
        assert cluster.kill_node("node2")
        assert netns.netns_pids(ns) == []
        state = cluster.wait_for(
            lambda: (s := _node_state(cluster, "node2")) and
            ("DOWN" in s or "NOT_RESPONDING" in s) and s, "node2 DOWN or NOT_RESPONDING")
        assert "NOT_RESPONDING" in state or "DOWN" in state
        cluster.wait_for(lambda: _squeue_state(cluster, job_id) != "RUNNING",
                         f"job {job_id} leaves RUNNING")
        final = cluster.wait_for(
            lambda: [r["State"] for r in cluster.sacct(job_id)
                     if r["JobID"] == job_id and r["State"] not in ("RUNNING", "PENDING")],
            f"sacct records the end of job {job_id}")
        assert final == ["NODE_FAIL"]
        cluster.wait_for(lambda: "DOWN" in _node_state(cluster, "node2"), "node2 DOWN")
        assert {n: s for n, s in cluster.node_states().items() if n != "node2"} == {
            "node1": "idle", "node3": "idle"}
    finally:
        cluster.restart_node("node2")  # ReturnToService=1: idle again once slurmd registers
    assert _wait_all_idle(cluster)["node2"] == "idle"


def test_stop_leaves_nothing_behind_and_the_cluster_starts_again(
        multinode_cluster: MultiNodeCluster, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = multinode_cluster
    hosts_running = Path("/etc/hosts").read_text()
    assert all(f"{a} {n} " in hosts_running for n, a in cluster.node_addrs.items())
    hosts_before = "".join(line for line in hosts_running.splitlines(keepends=True)
                           if netns.HOSTS_MARKER not in line)
    pids = json.loads((cluster.root / "pids.json").read_text())
    assert set(pids) == {"munged", "mariadbd", "slurmdbd", "slurmctld",
                         "slurmd@node1", "slurmd@node2", "slurmd@node3"}

    def assert_nothing_left() -> None:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.split()
        assert not set(listed) & set(cluster.namespaces)
        assert not Path("/sys/class/net", netns.BRIDGE).exists()
        assert not [p for p in Path("/sys/class/net").iterdir()
                    if p.name.startswith(netns.VETH_PREFIX)]
        assert cluster.network.leftovers() == []
        assert Path("/etc/hosts").read_text() == hosts_before

    cluster.stop()
    cluster.stop()  # idempotent
    assert_nothing_left()
    assert not any(multinode_module.single._pid_alive(int(p)) for p in pids.values())
    assert cluster.leftover_processes() == []

    # a start that fails (MariaDB refuses its options) reports the log and cleans up
    broken = MultiNodeCluster(tmp_path / "broken", install_etc_conf=False)
    real_argv = multinode_module.accounting.Accounting.mariadbd_argv
    monkeypatch.setattr(multinode_module.accounting.Accounting, "mariadbd_argv",
                        lambda self: [*real_argv(self), "--no-such-option-d5pipe"])
    with pytest.raises(multinode_module.ClusterError, match="mariadbd exited") as failed:
        broken.start()
    assert "no-such-option-d5pipe" in str(failed.value)
    assert_nothing_left()
    assert broken.leftover_processes() == []
    broken.stop()  # safe after a failed start
    monkeypatch.undo()

    cluster.start()  # the session fixture's cluster is usable again for later tests
    assert _wait_all_idle(cluster) == {n: "idle" for n in cluster.node_names}
