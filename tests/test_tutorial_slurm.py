"""The SLURM sandbox tutorial (docs/tutorials/slurm-sandbox.md) runs as written: its own 4-node
sandbox (``up``/``down`` are the page's commands), a sweep in arrays chunked below the page's
``--max-array-size``, and a scaling study over 1, 2 and 4 nodes on two engines.

The fixture is named ``sandbox`` so that tests/conftest.py orders it with the other modules that
start a cluster of their own (after the one-node cluster's tests, which it stops, and before the
3-node cluster's): only one multi-node cluster runs on a machine at a time."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tutorial_pages import ROOT, TUTORIALS, clone_like, run_page_ok

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    """A clone-like directory; the cluster the page starts under ``sb`` is taken down whatever happens."""
    from multinode_fixture import _ensure_installed
    from tests.slurm_fixture import stop_single_node_cluster

    _ensure_installed()
    stop_single_node_cluster()  # it owns /etc/slurm/slurm.conf, which the page installs
    work = clone_like(tmp_path / "clone")
    try:
        yield work
    finally:
        if (work / "sb" / "pids.json").exists():
            subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm_sandbox.py"), "down", str(work / "sb")],
                           capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.timeout(1800)
def test_slurm_sandbox_tutorial(sandbox: Path) -> None:
    run_page_ok(TUTORIALS / "slurm-sandbox.md", sandbox, timeout_s=1700)
    wide = pd.read_parquet(sandbox / "runs" / "wide" / "results.parquet")
    assert (wide.status == "ok").all() and wide.slurm_job_id.notna().all()
    assert wide.point_id.nunique() == 12
    scale = pd.read_parquet(sandbox / "runs" / "scale" / "results.parquet")
    assert (scale.status == "ok").all()
    assert set(scale["distributed.nodes"].dropna().astype(int)) == {1, 2, 4}
    report = (sandbox / "runs" / "scale" / "report.html").read_text(encoding="utf-8")
    assert "share one host" in report
    status = subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm_sandbox.py"), "status", str(sandbox / "sb")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 1, status.stdout + status.stderr  # the page took its cluster down: nothing runs
