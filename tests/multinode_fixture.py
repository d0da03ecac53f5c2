"""pytest plugin: the session-scoped ``multinode_cluster`` fixture (a real 3-node SLURM cluster).

Enable it from ``tests/conftest.py`` with::

    pytest_plugins = ["tests.multinode_fixture"]

or for one run with ``pytest -p tests.multinode_fixture ...``. The cluster
(tests/cluster/multinode_cluster.py: one slurmd per network namespace, slurmctld, slurmdbd on
MariaDB) starts once per session under a pytest temp directory, installs Debian's packages first
if any is missing and we are root (tests/cluster/install.sh), and is stopped by PID at session
end. It needs root; without it the tests that use it are skipped. It leaves
/etc/slurm/slurm.conf to the one-node ``slurm_cluster`` fixture, so both can run in one session:
clients reach it through ``cluster.env()`` (``SLURM_CONF``). How long it took to start is in
``cluster.start_seconds`` and in the terminal summary. Tests that use it should be marked
``slurm`` and ``slow``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = ROOT / "tests" / "cluster"
INSTALL_TIMEOUT_S = 900.0
_started: list[str] = []


def _load_multinode_module() -> ModuleType:
    name = "d5pipe_tests_multinode_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CLUSTER_DIR / "multinode_cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


multinode_module = _load_multinode_module()
MultiNodeCluster = multinode_module.MultiNodeCluster


def _installed() -> bool:
    return bool(multinode_module.binaries_present() and multinode_module.PMIX_LIB.exists())


def _ensure_installed() -> None:
    if os.geteuid() != 0:
        pytest.skip("the multi-node SLURM cluster needs root (network namespaces, /etc/hosts)")
    if _installed():
        return
    proc = subprocess.run(["bash", str(CLUSTER_DIR / "install.sh")], capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if proc.returncode != 0 or not _installed():
        pytest.fail(f"tests/cluster/install.sh failed:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="session")
def multinode_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeCluster]:
    """A running cluster of node1..node3 (2 CPUs each) on the bridge d5br0, with accounting."""
    _ensure_installed()
    from tests.slurm_fixture import stop_single_node_cluster

    # The SLURM plugin's job steps drop SLURM_CONF and read /etc/slurm/slurm.conf: the one-node
    # cluster hands it over (its tests ran first: tests/conftest.py puts the multi-node ones last).
    stop_single_node_cluster()
    cluster = MultiNodeCluster(tmp_path_factory.mktemp("multinode"), install_etc_conf=True)
    cluster.start()
    line = (f"multinode SLURM cluster: {len(cluster.node_names)} nodes up in "
            f"{cluster.start_seconds:.1f} s ({cluster.root})")
    print(f"\n{line}")
    _started.append(line)
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the cluster's start-up time (fixture output is captured otherwise)."""
    for line in _started:
        terminalreporter.write_line(line)
