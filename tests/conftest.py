"""Shared fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.slurm_fixture", "tests.multinode_fixture"]

ROOT = Path(__file__).resolve().parents[1]
TEST_CONF = ROOT / "tests" / "configs"


def d5pipe(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(
        [sys.executable, "-m", "d5pipe.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
    )


@pytest.fixture()
def cli():
    return d5pipe


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """All SLURM tests go to one pytest-xdist worker (group ``slurm``: the clusters share
    /etc/slurm/slurm.conf and the bridge), and within it the multi-node ones run last: the 3-node
    cluster takes /etc/slurm/slurm.conf over from the one-node cluster, which is stopped then
    (see tests/multinode_fixture.py). The SLURM tests mostly wait on SLURM's polling, so the
    other worker runs the rest of the suite meanwhile."""
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.xdist_group(name="slurm"))
    items.sort(key=lambda item: "multinode_cluster" in getattr(item, "fixturenames", ()))
