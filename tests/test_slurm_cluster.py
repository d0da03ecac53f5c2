"""The local SLURM test cluster, d5pipe.execute.slurm against it, and Snakemake's SLURM plugin end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.execute.resources import snakemake_resources
from d5pipe.execute.slurm import query_jobs
from slurm_fixture import SlurmCluster, cluster_module, run_snakemake_slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(120)]


def _sbatch(cluster: SlurmCluster, cwd: Path, *args: str) -> str:
    proc = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=cluster.env(),
                          capture_output=True, text=True, timeout=20, check=True)
    return proc.stdout.strip().split(";")[0]


def test_cluster_is_up_on_loopback(slurm_cluster: SlurmCluster) -> None:
    conf = slurm_cluster.conf.read_text()
    assert "NodeAddr=127.0.0.1" in conf
    assert Path("/etc/slurm/slurm.conf").read_text() == conf
    state = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %c"], env=slurm_cluster.env(),
                           capture_output=True, text=True, timeout=10, check=True).stdout.split()
    assert state[0] == "localhost" and state[2] == "4"


def test_sbatch_job_completes_and_is_recorded(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = _sbatch(slurm_cluster, tmp_path, "-o", "job.out", "--wrap",
                     "echo $SLURM_JOB_ID $SLURM_JOB_NODELIST")
    record = slurm_cluster.wait_for_jobcomp(job_id)
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0"
    assert (tmp_path / "job.out").read_text().split() == [job_id, "localhost"]
    [job] = query_jobs(job_ids=[job_id], env=slurm_cluster.env())
    assert job.state == "COMPLETED" and job.finished


def test_failing_job_is_recorded_as_failed(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = _sbatch(slurm_cluster, tmp_path, "-o", "/dev/null", "--wrap", "exit 3")
    record = slurm_cluster.wait_for_jobcomp(job_id)
    assert record["JobState"] == "FAILED" and record["ExitCode"] == "3:0"


def test_srun_runs_two_tasks(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    proc = subprocess.run(["srun", "-n", "2", "sh", "-c", "echo $SLURM_PROCID $SLURM_NTASKS"],
                          cwd=tmp_path, env=slurm_cluster.env(), capture_output=True, text=True,
                          timeout=30, check=True)
    assert sorted(proc.stdout.splitlines()) == ["0 2", "1 2"]


def test_provenance_inside_a_job_falls_back_to_squeue(slurm_cluster: SlurmCluster,
                                                      tmp_path: Path) -> None:
    code = "import json; from d5pipe.execute.slurm import slurm_provenance; print(json.dumps(slurm_provenance()))"
    # The plugin's MPI-style job steps drop SLURM_JOB_NODELIST; emulate that with env -u.
    job_id = _sbatch(slurm_cluster, tmp_path, "-o", "prov.json", "--wrap",
                     f"env -u SLURM_JOB_NODELIST -u SLURM_NODELIST {sys.executable} -c '{code}'")
    assert slurm_cluster.wait_for_jobcomp(job_id)["JobState"] == "COMPLETED"
    prov = json.loads((tmp_path / "prov.json").read_text())
    assert prov == {"slurm_job_id": job_id, "slurm_nodelist": "localhost", "slurm_cluster": "d5pipe-test"}


def test_query_jobs_reports_a_missing_cluster_as_user_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(tmp_path / "absent.conf")}
    with pytest.raises(D5PipeError, match="squeue"):
        query_jobs(name="nothing", timeout_s=2, env=env)


SNAKEFILE = """
rule all:
    input: "out/single.txt", "out/two_ranks.txt"

rule single:
    output: "out/single.txt"
    resources: **{single}
    shell: "echo $SLURM_JOB_ID > {{output}}"

rule two_ranks:
    output: "out/two_ranks.txt"
    resources: **{two}
    shell: "srun -n {{resources.tasks}} sh -c 'echo $SLURM_PROCID $SLURM_JOB_ID' > {{output}}"
"""


def test_snakemake_workflow_runs_through_the_plugin(slurm_cluster: SlurmCluster,
                                                    tmp_path: Path) -> None:
    single = snakemake_resources({"runtime_min": 5, "mem_mb": 200})
    two = snakemake_resources({"runtime_min": 5, "mem_mb": 200, "tasks": 2})
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(single=single, two=two))
    proc = run_snakemake_slurm(slurm_cluster, tmp_path, timeout_s=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = re.search(r"SLURM run ID: (\S+)", proc.stderr + proc.stdout)
    assert run_id is not None
    records = [r for r in slurm_cluster.jobcomp_records() if r.get("Name") == run_id.group(1)]
    assert sorted(r["JobState"] for r in records) == ["COMPLETED", "COMPLETED"]
    by_cpus = {r["ProcCnt"]: r for r in records}
    assert set(by_cpus) == {"1", "2"}  # the two-rank point is ONE job with 2 tasks
    assert (tmp_path / "out/single.txt").read_text().split() == [by_cpus["1"]["JobId"]]
    ranks = sorted((tmp_path / "out/two_ranks.txt").read_text().splitlines())
    two_id = by_cpus["2"]["JobId"]
    assert ranks == [f"0 {two_id}", f"1 {two_id}"]
    assert by_cpus["2"]["TimeLimit"] == "5"


def test_a_second_cluster_starts_and_stops_without_leftovers(tmp_path_factory:
                                                             pytest.TempPathFactory) -> None:
    cluster = cluster_module.SlurmCluster(tmp_path_factory.mktemp("slurm2"), cpus=1,
                                          install_etc_conf=False)
    etc_before = Path("/etc/slurm/slurm.conf").read_bytes() if Path(
        "/etc/slurm/slurm.conf").exists() else None
    cluster.start()
    try:
        pids = json.loads(cluster.layout.pids.read_text())
        assert set(pids) == {"munged", "slurmctld", "slurmd"}
        work = cluster.layout.root / "work"
        work.mkdir()
        job_id = _sbatch(cluster, work, "-o", "/dev/null", "--wrap", "sleep 60")
        assert query_jobs(job_ids=[job_id], env=cluster.env())[0].job_id == job_id
    finally:
        cluster.stop()
    assert not any(cluster_module._pid_alive(int(p)) for p in pids.values())
    assert cluster.leftover_processes() == []
    assert not cluster.layout.pids.exists()
    etc_after = Path("/etc/slurm/slurm.conf").read_bytes() if Path(
        "/etc/slurm/slurm.conf").exists() else None
    assert etc_after == etc_before


def test_slurm_offers_the_pmix_plugin_the_mpi_tests_rely_on(slurm_cluster: SlurmCluster) -> None:
    """Debian's mpi_pmix.so dlopens libpmix.so (libpmix-dev): without it `srun --mpi=pmix` fails."""
    out = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=60,
                         env=slurm_cluster.env(), check=False)
    assert "pmix" in (out.stdout + out.stderr), out.stdout + out.stderr
