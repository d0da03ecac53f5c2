"""No stale verdict: after the user's code changes back to a version whose points already have
records, ``d5pipe run`` re-derives the verdict from the current points (it used to say "nothing to
do" and repeat the verdict of the version in between, while ``d5pipe status`` said otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD = 'return torch.einsum("ik,kj->ij", a, b)'
WRONG = 'return torch.einsum("ik,kj->ij", a, b) + 1.0'


def _cli(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(work / "byo")
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", *args], capture_output=True, text=True,
                          cwd=work, env=env, timeout=600, check=False)


@pytest.mark.slow
def test_code_back_and_forth_gives_the_verdict_of_the_current_code(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "byo", tmp_path / "byo")
    ops = tmp_path / "byo" / "mypkg" / "ops.py"
    assert GOOD in ops.read_text()
    run = ["run", "byo", "stages=[level0]", "repetitions=1", "--config-dir", "byo/conf", "--allow", "mypkg", "--out", "run"]
    assert _cli(tmp_path, *run).returncode == 0
    ops.write_text(ops.read_text().replace(GOOD, WRONG))
    assert _cli(tmp_path, *run).returncode == 3  # the user operator's output is wrong: its check fails
    ops.write_text(ops.read_text().replace(WRONG, GOOD))
    back = _cli(tmp_path, *run)
    assert back.returncode == 0, back.stdout[-2000:]
    assert "all 2 points passed" in back.stdout.splitlines()[-1]
    status = _cli(tmp_path, "status", "run")
    assert status.returncode == 0, status.stdout
    assert (tmp_path / "run" / "code" / "mypkg" / "ops.py").read_text() == ops.read_text()  # code/ matches
    again = _cli(tmp_path, *run)  # and a true no-op stays one
    assert again.returncode == 0 and "nothing to do" in again.stdout
