"""pytest plugin: the session-scoped ``slurm_cluster`` fixture (a real one-node SLURM cluster).

Enable it from ``tests/conftest.py`` with::

    pytest_plugins = ["slurm_fixture"]

The cluster (tests/cluster/slurm_cluster.py) starts once per session under a pytest temp
directory, installs Debian's packages first if they are missing and we are root
(tests/cluster/install.sh), and is stopped by PID at session end. Tests that use it should be
marked ``slurm`` and drive Snakemake through :func:`run_snakemake_slurm`, which always applies
a hard timeout (a failing status query would otherwise hang the run silently).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = ROOT / "tests" / "cluster"
PROFILE = ROOT / "profiles" / "slurm"
TEST_PROFILE = CLUSTER_DIR / "test_profile"
INSTALL_TIMEOUT_S = 900.0


def _load_cluster_module() -> ModuleType:
    name = "d5pipe_tests_slurm_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CLUSTER_DIR / "slurm_cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cluster_module = _load_cluster_module()
SlurmCluster = cluster_module.SlurmCluster


def _ensure_installed() -> None:
    if cluster_module.binaries_present():
        return
    if os.geteuid() != 0:
        pytest.skip("SLURM/munge not installed and not root: run tests/cluster/install.sh")
    proc = subprocess.run(["bash", str(CLUSTER_DIR / "install.sh")], capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if proc.returncode != 0 or not cluster_module.binaries_present():
        pytest.fail(f"tests/cluster/install.sh failed:\n{proc.stdout}\n{proc.stderr}")


_running: list[SlurmCluster] = []
_previous_conf: list[str | None] = []


def stop_single_node_cluster() -> None:
    """Stop the one-node cluster now (it owns /etc/slurm/slurm.conf, which the SLURM plugin's job
    steps read: the multi-node cluster needs it next; tests/conftest.py orders its tests last)."""
    while _running:
        cluster = _running.pop()
        previous = _previous_conf.pop() if _previous_conf else None
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running one-node cluster (4 CPUs on loopback); ``SLURM_CONF`` set for the session."""
    _ensure_installed()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    _previous_conf.append(os.environ.get("SLURM_CONF"))
    os.environ["SLURM_CONF"] = str(cluster.conf)
    _running.append(cluster)
    try:
        yield cluster
    finally:
        stop_single_node_cluster()


def snakemake_slurm_args(extra: Sequence[str] = ()) -> list[str]:
    """Snakemake arguments for the test cluster: the real profile plus the test overrides."""
    return ["--executor", "slurm", "--profile", str(PROFILE),
            "--workflow-profile", str(TEST_PROFILE), *extra]


def run_snakemake_slurm(cluster: SlurmCluster, workdir: Path, extra: Sequence[str] = (),
                        timeout_s: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Run ``snakemake`` in ``workdir`` on the test cluster; fails the test on timeout."""
    cmd = [sys.executable, "-m", "snakemake", *snakemake_slurm_args(extra)]
    try:
        return subprocess.run(cmd, cwd=workdir, env=cluster.env(), capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(f"snakemake on SLURM did not finish within {timeout_s} s:\n{text[-3000:]}")
