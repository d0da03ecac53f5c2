"""A tiny experiment end to end through Snakemake: outputs, no-op re-run, per-point resume, lint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, TEST_CONF, d5pipe

pytestmark = pytest.mark.slow


def _mtimes(run: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (run / "points" / "level0").glob("*.json")}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("tiny") / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert str((run / "report.html").resolve()) in r.stdout
    return run


def test_run_writes_results_manifest_config_report(tiny_run: Path) -> None:
    for name in ("results.parquet", "manifest.json", "config.yaml", "report.html", "report.md"):
        assert (tiny_run / name).is_file(), name
    df = pd.read_parquet(tiny_run / "results.parquet")
    for col in ("experiment", "stage", "point_id", "metric", "value", "unit", "status", "seed", "env_hash",
                "operators.size"):
        assert col in df.columns, col
    assert set(df["operators.size"]) == {16, 32, 48}
    assert set(df["status"]) == {"ok"}
    assert (df["experiment"] == "tiny").all()
    manifest = json.loads((tiny_run / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["seed"] == 42
    assert set(manifest["seeds"]["level0"]) == set(df["point_id"])
    assert manifest["env_hash"] in set(df["env_hash"])
    assert manifest["env_hashes"] == sorted(set(df["env_hash"]))
    assert (tiny_run / "env" / f"{manifest['env_hash']}.json").is_file()


def test_second_run_does_nothing(tiny_run: Path) -> None:
    before = _mtimes(tiny_run)
    report_mtime = (tiny_run / "report.html").stat().st_mtime_ns
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(tiny_run))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nothing to do: every point has its record and the results are up to date" in r.stdout
    assert "jobs]" not in r.stdout  # the console names no finished job
    assert _mtimes(tiny_run) == before
    assert (tiny_run / "report.html").stat().st_mtime_ns == report_mtime


def test_records_kept_from_another_environment_are_announced(tiny_run: Path) -> None:
    manifest_path = tiny_run / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    real = manifest["submit_env_hash"]
    manifest["submit_env_hash"] = "0123456789abcdef"  # as if planned on another machine
    manifest_path.write_text(json.dumps(manifest))
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(tiny_run))
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"environment changed since {tiny_run} was planned (env 0123456789abcdef -> {real}" in r.stdout
    assert "3 recorded points are kept" in r.stdout
    again = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(tiny_run))
    assert "environment changed" not in again.stdout  # said once: the manifest has the new hash


def test_deleted_record_is_recomputed_alone(tiny_run: Path) -> None:
    before = _mtimes(tiny_run)
    victim = sorted(before)[0]
    (tiny_run / "points" / "level0" / victim).unlink()
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(tiny_run))
    assert r.returncode == 0, r.stderr[-2000:]
    after = _mtimes(tiny_run)
    assert set(after) == set(before)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {victim}


def test_plan_reports_done_points(tiny_run: Path) -> None:
    r = d5pipe("plan", "tiny", "--config-dir", str(TEST_CONF), "--out", str(tiny_run), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    st = info["stages"][0]
    assert st["points"] == 3 and st["points_done"] == 3 and st["jobs"] == 2 and st["jobs_done"] == 2


def test_report_regenerates_without_rerun(tiny_run: Path) -> None:
    (tiny_run / "report.html").unlink()
    before = _mtimes(tiny_run)
    r = d5pipe("report", str(tiny_run))
    assert r.returncode == 0, r.stderr
    assert (tiny_run / "report.html").is_file()
    assert _mtimes(tiny_run) == before


def test_status_counts(tiny_run: Path) -> None:
    r = d5pipe("status", str(tiny_run))
    assert r.returncode == 0
    assert r.stdout.splitlines()[1].split() == ["level0", "3", "3", "0", "0", "0"]


def test_snakemake_lint(tiny_run: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tiny_run)],
        capture_output=True, text=True, timeout=300,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    assert "Lints for" not in out, out[-3000:]


def test_snakemake_report(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "smk_report.html"
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tiny_run), "--report", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert out.stat().st_size > 10_000


def test_cpus_per_task_sets_the_threads_of_the_measurements(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run),
               "sweep.grid.operators.size=[16]", "executor.resources.level0.cpus_per_task=2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (run / "env").glob("*.json")]
    assert records
    for rec in records:  # the shard's process: Snakemake's OMP_NUM_THREADS reached torch
        assert rec["env"]["OMP_NUM_THREADS"] == "2"
        assert rec["torch"]["num_threads"] == 2


def test_local_cores_are_job_slots_times_the_widest_stage(tmp_path: Path) -> None:
    from d5pipe import D5PipeError
    from d5pipe.execute.snakemake import build_command

    ex = {"name": "local", "jobs": 3,
          "resources": {"default": {"cpus_per_task": 2}, "level1": {"cpus_per_task": 5}}}
    cmd = build_command(tmp_path, ex)
    assert cmd[cmd.index("--cores") + 1] == "15"
    cmd = build_command(tmp_path, {"name": "local", "jobs": 2})
    assert cmd[cmd.index("--cores") + 1] == "2"
    with pytest.raises(D5PipeError, match=r"executor.resources.level0.cpus_per_task"):
        build_command(tmp_path, {"name": "local", "resources": {"level0": {"cpus_per_task": "x"}}})


def test_a_stage_entry_overrides_default_even_with_the_schema_value() -> None:
    from d5pipe.execute.snakefile_api import threads_of

    ex = {"name": "local", "resources": {"default": {"cpus_per_task": 8, "partition": "big"},
                                         "level0": {"cpus_per_task": 1, "partition": None}}}
    assert threads_of(ex, "level0") == 1  # back to the schema's value, on purpose
    assert threads_of(ex, "level1") == 8 and threads_of(ex, "prepare_data") == 8
    assert threads_of({"name": "local"}, "level2") == 1


def test_composed_resources_inherit_unset_fields() -> None:
    from d5pipe.core.stage_resources import merged_resources as _stage_resource_conf
    from d5pipe.execute.run import load_plan

    plan = load_plan("quickstart", ["executor=slurm", "executor.resources.default.partition=gpu",
                                    "executor.resources.level2.runtime_min=120",
                                    "executor.resources.default.cpus_per_task=4",
                                    "executor.resources.level0.cpus_per_task=1"])
    ex = plan.config["executor"]
    level2 = _stage_resource_conf(ex, "level2")
    assert (level2["partition"], level2["runtime_min"], level2["cpus_per_task"]) == ("gpu", 120, 4)
    assert _stage_resource_conf(ex, "level0")["cpus_per_task"] == 1
    assert _stage_resource_conf(ex, "level1")["runtime_min"] == 30  # slurm.yaml's default entry


def test_an_array_starts_after_its_grace_so_the_throttle_comes_first(monkeypatch) -> None:
    """Every array stage under SLURM is submitted with --begin: d5pipe's executor sets the array's
    ArrayTaskThrottle after sbatch and then moves the start to now (d5pipe.execute.slurm_executor);
    level 3 and placed stages are not arrays, get no delay and take one of the run's job slots instead."""
    from d5pipe.execute import snakefile_api as api
    from d5pipe.execute.slurm_arrays import SLOTS

    ex = {"name": "slurm", "arrays": True, "array_throttle": 2, "jobs": 20, "resources": {}}
    monkeypatch.setattr(api, "executor_config", lambda run_dir: ex)
    monkeypatch.setattr(api, "_placed", lambda run_dir, stage: False)
    begin = f"--begin=now+{api.THROTTLE_GRACE_S}"
    assert api.stage_resources(".", "level0")["slurm_extra"] == begin
    assert api.stage_resources(".", "prepare_data")["slurm_extra"] == begin
    level3 = api.stage_resources(".", "level3")
    assert "slurm_extra" not in level3 and level3[SLOTS] == 1
    assert SLOTS not in api.stage_resources(".", "level0")
    ex["array_throttle"] = 0
    assert api.stage_resources(".", "level0")["slurm_extra"] == begin
    ex.update(array_throttle=2, arrays=False)
    assert "slurm_extra" not in api.stage_resources(".", "level0")
    assert SLOTS not in api.stage_resources(".", "level3")
    ex["arrays"] = True
    monkeypatch.setattr(api, "_placed", lambda run_dir, stage: True)
    monkeypatch.setattr(api, "shard_nodelist", lambda *a: "--nodelist=n2")
    extra = api.stage_resources(".", "level0")["slurm_extra"]
    assert callable(extra) and extra(type("W", (), {"shard": "s00000"})()) == "--nodelist=n2"
