"""A local run never loads Snakemake's SLURM plugin nor calls a SLURM command (issue: the plugin's
``scontrol show config`` waited ~9 s per run wherever Slurm's client has no controller)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from d5pipe.execute.snakemake_main import wants_slurm
from tests.conftest import ROOT, TEST_CONF, d5pipe

SLURM_COMMANDS = ("scontrol", "sinfo", "squeue", "sacct", "sbatch", "srun", "scancel", "sacctmgr")


@pytest.mark.parametrize(("args", "expected"), [
    (["--cores", "2", "--snakefile", "S"], False),
    (["--executor", "slurm", "--jobs", "3"], True),
    (["--executor=slurm"], True),
    (["-e", "slurm-jobstep"], True),
    (["--executor", "local"], False),
    (["--profile", "profiles/slurm"], True),
    (["--workflow-profile=p"], True),
])
def test_only_arguments_that_may_select_slurm_load_its_plugins(args: list[str], expected: bool) -> None:
    assert wants_slurm(args) is expected


def _fake_slurm(tmp_path: Path) -> tuple[Path, Path]:
    """A bin/ of SLURM commands that log their call and then hang, like a client without a controller."""
    bin_dir, log = tmp_path / "bin", tmp_path / "slurm_calls.log"
    bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nsleep 30\nexit 1\n')
        exe.chmod(0o755)
    return bin_dir, log


def test_a_local_run_calls_no_slurm_command(tmp_path: Path) -> None:
    bin_dir, log = _fake_slurm(tmp_path)
    run = tmp_path / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run), "sweep.grid.operators.size=[16]",
               cwd=ROOT, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "results.parquet").is_file()
    calls = log.read_text() if log.exists() else ""
    assert calls == "", f"a local run called SLURM commands:\n{calls}"


def test_the_warm_snakemake_process_leaves_the_slurm_plugin_unloaded_until_asked() -> None:
    code = ("import sys\nfrom d5pipe.execute import snakemake_main as m\nm.warm()\n"
            "before = 'snakemake_executor_plugin_slurm' in sys.modules\n"
            "reg = m.executor_registry(slurm=True)\n"
            "print(before, 'slurm' in reg.plugins, 'local' in reg.plugins)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["False", "True", "True"]
