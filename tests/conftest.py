"""Shared fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

pytest_plugins = ["tests.slurm_fixture", "tests.multinode_fixture", "tests.cpu_time"]

# The shared dataset cache (d5pipe.rundir.data_cache) is off in the tests: each run prepares its own
# data, as the tests about preparation expect; tests/test_data_cache.py turns it on in a tmp dir.
os.environ.setdefault("D5PIPE_DATA_CACHE_MB", "0")
# No run of the suite lands in the user's history store; tests/test_history*.py name a store of their own.
os.environ["D5PIPE_HISTORY"] = "off"
# The machine's ceilings (d5pipe.measure.ceilings) measured while the suite loads both cores would be
# too low to be ceilings: the tests keep theirs in a cache of their own, never the user's.
if "D5PIPE_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _TEST_CACHE = tempfile.mkdtemp(prefix="d5pipe-test-cache-")
    os.environ["D5PIPE_CACHE_DIR"] = _TEST_CACHE
    atexit.register(shutil.rmtree, _TEST_CACHE, True)

# The points a test runs in the pytest process use one torch thread: `make test` runs four pytest
# processes on two cores, where torch's default pool (a thread per core) spins against the other
# lanes' work (a micro-batch test of 0.75 s alone took 69 s there). The processes a test starts
# (shards, ranks, the CLI) get the threads their config or tests/conftest.d5pipe gives them.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TEST_CONF = ROOT / "tests" / "configs"
PLUGIN_FIXTURES = ROOT / "tests" / "plugin_fixtures"
FRAMEWORK_THREADS = 1
"""The threads of every TensorFlow and JAX point the tests run in the pytest process (levels 0 and 2):
both fix their pools once per process and a later point that asks for others fails
(d5pipe.levels.framework_threads), so the modules that share a pytest process use one count; other
counts are tested in processes of their own (tests/test_framework_threads.py). One thread is also
the only count at which level 0's TensorFlow (inter-op pool 1) and level 2's (inter-op pool = its
threads) agree."""
TESTING_OPS = "testing_ops"
"""The deliberately broken operators (tests/plugin_fixtures/testing_ops.py): user code to d5pipe."""
TESTING_OPS_ENV = {
    "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_FIXTURES), os.environ.get("PYTHONPATH")])),
    "D5PIPE_ALLOW": ",".join(filter(None, [os.environ.get("D5PIPE_ALLOW"), TESTING_OPS])),
}
"""What a run of a config with those operators needs: the module on the path, allowed by the runner."""


def d5pipe(*args: str, cwd: Path | None = None, timeout: float = 600,
           env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (one thread unless ``env`` says otherwise; ``env`` sets
    variables, and removes those it maps to None)."""
    full = {"OMP_NUM_THREADS": "1", **os.environ}
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full)


@pytest.fixture()
def cli():
    return d5pipe


def user_code_for_ranks(monkeypatch: pytest.MonkeyPatch, prefix: str, path: Path) -> None:
    """User code under ``path``, allowed as ``prefix``: importable in this process and by the ranks
    a level-3 point launches (they inherit PYTHONPATH and the allow-list). A PYTHONPATH already set
    stays after ``path``: the ranks import the d5pipe under test (a worktree's src), not the installed one."""
    monkeypatch.setenv("D5PIPE_ALLOW", prefix)
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(path), *kept]))
    monkeypatch.syspath_prepend(str(path))


CLUSTER_FIXTURES = frozenset({"slurm_cluster", "multinode_cluster", "sandbox"})


@pytest.hookimpl(tryfirst=True)
def rank_processes(under: Path) -> list[int]:
    """PIDs of level-3 rank workers (Python processes) whose command line names a path under ``under`` (their session
    directory or spec): what a test's points left running."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended while we looked
        ranks = argv[0].rsplit(b"/", 1)[-1].startswith(b"python")  # not their launcher (prterun, torchrun)
        if ranks and b"d5pipe.levels.level3.worker" in argv and any(str(under).encode() in a for a in argv):
            pids.append(int(proc.name))
    return pids


def ranks_down_to(under: Path, at_most: int, ceiling_s: float = 120.0) -> list[int]:
    """Wait until at most ``at_most`` rank workers under ``under`` are alive (killed ranks take a
    moment to exit on a busy machine), or ``ceiling_s`` has passed; the PIDs alive then."""
    import time

    deadline = time.monotonic() + ceiling_s
    while len(alive := rank_processes(under)) > at_most and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses a SLURM test cluster is marked ``slurm`` (``make test`` runs those in a
    process of their own, scripts/run_tests.sh: the clusters share /etc/slurm/slurm.conf and may
    not overlap), and the multi-node ones run last: the 3-node cluster takes /etc/slurm/slurm.conf
    over from the one-node cluster, which is stopped then (see tests/multinode_fixture.py). Before
    them, the tests of a module that starts a sandbox of its own (fixture ``sandbox``, e.g.
    tests/test_slurm_scale.py): it too stops the one-node cluster, and only one multi-node cluster
    runs at a time."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slurm") is None:
            item.add_marker(pytest.mark.slurm)
    def order(item: pytest.Item) -> int:
        names = getattr(item, "fixturenames", ())
        return 2 if "multinode_cluster" in names else 1 if "sandbox" in names else 0

    items.sort(key=order)
