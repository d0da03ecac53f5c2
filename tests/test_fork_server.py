"""A local run's shard jobs are forks of the run's fork server (d5pipe.execute.fork_server): each
repetition its own process, recorded as such; the server ends with the run; a killed client takes
its child with it; without a server the job runs in a fresh process and its records say so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TEST_CONF, d5pipe


@pytest.fixture(autouse=True)
def absolute_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client and server run in the run directory, as ``d5pipe run`` makes sure its jobs can."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(os.path.abspath(e) for e in entries if e))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("fork") / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run),
               "sweep.grid.operators.size=[16]", "repetitions=3", "executor.fork_server=true")
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def _starts(run: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text())["provenance"]["process_start"] for p in sorted((run / "points" / "level0").glob("*.json"))]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _rerun_copy(run: Path, dest: Path, timer: dict[str, object] | None = None) -> tuple[Path, list[str]]:
    """A copy of the run whose first shard must run again (its record and marker removed); the job's
    arguments for that shard."""
    shutil.copytree(run, dest)
    shard = json.loads((dest / "plan" / "level0" / "s00000.json").read_text())
    (dest / "points" / "level0" / f"{shard['points'][0]['point_id']}.json").unlink()
    (dest / "shards" / "level0" / "s00000.json").unlink()
    if timer:
        cfg = yaml.safe_load((dest / "config.yaml").read_text())
        cfg["timer"].update(timer)
        (dest / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dest, ["level0", "s00000", "shards/level0/s00000.json", "logs/level0/s00000.log"]


def _client(run: Path, sock: str, job: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "d5pipe.execute.fork_client", sock, *job], cwd=run,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_each_repetition_is_a_fork_of_its_own_and_the_server_ends_with_the_run(finished: Path) -> None:
    starts = _starts(finished)
    assert len(starts) == 3
    assert {s["how"] for s in starts} == {"fork"}
    assert len({s["pid"] for s in starts}) == 3  # one process per repetition
    (server,) = {int(str(s["server_pid"])) for s in starts}
    assert server not in {s["pid"] for s in starts}
    heaps = [s["heap"] for s in starts]  # each child varied its heap layout, and says how
    assert all(64 <= h["blocks"] <= 256 and h["kept"] <= h["blocks"] for h in heaps)  # type: ignore[index, operator]
    assert len({json.dumps(h, sort_keys=True) for h in heaps}) == 3
    assert not _alive(server)
    assert not (finished / "shards" / "fork.sock").exists()


def test_children_take_the_servers_environment_readings(finished: Path) -> None:
    """The MPI probe and git ran in the server (before its forks), and the static parts were computed
    once for the run (the run directory, the jobs' cwd, changes while they run: not in the key)."""
    assert len([p for p in (finished / "env" / "cache").glob("*.json") if not p.name.startswith("light-")]) == 1
    records = [json.loads(p.read_text()) for p in (finished / "env").glob("*.json")]
    assert records
    for rec in records:
        assert rec["git"] is not None and rec["git"]["commit"]  # d5pipe's checkout
        if shutil.which("mpirun"):
            assert rec["mpi"]["library"]  # the server's probe, settled before it forked


def test_killing_the_client_kills_its_child(finished: Path, tmp_path: Path) -> None:
    from d5pipe.execute.fork_server import SOCKET, serving

    # a point that measures for most of a minute unless it is killed
    run, job = _rerun_copy(finished, tmp_path / "run", {"min_block_s": 0.05, "min_samples": 1000,
                                                          "max_samples": 1000, "budget_s": 100.0})
    with serving(run, ["level0"]) as server:
        client = _client(run, SOCKET, job)
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
        deadline = time.monotonic() + 60
        while not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = [int(p) for p in children.read_text().split()]
        client.kill()
        client.wait()
        deadline = time.monotonic() + 20
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    assert not _alive(server.pid)


def test_without_a_server_the_job_runs_fresh_and_says_so(finished: Path, tmp_path: Path) -> None:
    run, job = _rerun_copy(finished, tmp_path / "run")
    client = _client(run, "shards/no-such.sock", job)
    assert client.wait(300) == 0
    fresh = [s for s in _starts(run) if s["how"] == "fresh"]
    assert len(fresh) == 1
    assert "no fork server" in str(fresh[0]["why"])
    assert fresh[0]["pid"] == client.pid  # the client became the job (exec), no second process


FIRST_TENSOR = """
import os, sys
import torch
from d5pipe.execute.fork_server import vary_heap
offsets = set()
for _ in range(12):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if sys.argv[1] == "vary":
            vary_heap()
        os.write(w, str(torch.empty(64, 64).data_ptr() % 4096).encode())
        os._exit(0)
    os.close(w)
    offsets.add(os.read(r, 64))
    os.close(r)
    os.waitpid(pid, 0)
print(len(offsets))
"""


@pytest.mark.parametrize("how", ["vary", "inherit"])
def test_forks_put_their_tensors_at_offsets_of_their_own(how: str) -> None:
    """Forks of one server inherit its heap: unvaried, each puts its first tensor at the same offset
    within a page, which a fresh process would not (its imports, hash seed and environment move
    it); varied (what the server's children do), they spread over several."""
    out = subprocess.run([sys.executable, "-c", FIRST_TENSOR, how], capture_output=True, text=True, check=True)
    distinct = int(out.stdout)
    assert distinct >= 4 if how == "vary" else distinct == 1


def test_the_report_says_how_the_repetitions_started(finished: Path) -> None:
    from types import SimpleNamespace

    from d5pipe.results.report.sections import repetitions_fact

    assert "repetitions started as | forks of the run's fork server" in (finished / "report.md").read_text()
    for executor in ({"name": "local"}, {"name": "slurm", "fork_server": True}):  # SLURM jobs: always fresh
        assert repetitions_fact(SimpleNamespace(config={"executor": executor})).startswith("fresh processes")  # type: ignore[arg-type]
