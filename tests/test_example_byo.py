"""The bring-your-own-code example end to end through real Snakemake (examples/byo).

``PYTHONPATH=byo d5pipe run byo --config-dir byo/conf --allow mypkg``: every user component comes
out next to its built-in counterpart in results.parquet (time with CI, verdict, accuracy), the
report pairs the optimizers; editing one user module re-runs exactly the points that use it and
``d5pipe plan`` says why; the run's ``code/`` lets ``d5pipe reproduce`` run without the package
on the path, once the reproducer allows it (and not before).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import ROOT, d5pipe

EXAMPLE = ROOT / "examples" / "byo"


def _cli(*args: str, cwd: Path, pythonpath: str | None) -> subprocess.CompletedProcess[str]:
    return d5pipe(*args, cwd=cwd, timeout=900, env={"D5PIPE_ALLOW": None, "PYTHONPATH": pythonpath,
                                                    "OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": str(cwd / "xdg")})


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """(work dir with a copy of examples/byo, its run directory, the run's process)."""
    work = tmp_path_factory.mktemp("byo")
    shutil.copytree(EXAMPLE, work / "byo", ignore=shutil.ignore_patterns("__pycache__"))
    run = work / "run"
    r = _cli("run", "byo", "repetitions=1", "--config-dir", "byo/conf", "--allow", "mypkg", "--out", str(run), cwd=work,
             pythonpath="byo")  # relative, as in the docs: d5pipe makes it absolute for the jobs
    return work, run, r


def _value(df: pd.DataFrame, stage: str, metric: str, **axes: Any) -> pd.Series:
    rows = df[(df["stage"] == stage) & (df["metric"] == metric)]
    for k, v in axes.items():
        rows = rows[rows[k] == v]
    assert len(rows) >= 1, (stage, metric, axes)
    return rows.iloc[0]


@pytest.mark.slow
@pytest.mark.mpi
def test_every_user_component_is_compared_with_its_builtin(example: tuple[Path, Path, Any]) -> None:
    _work, run, r = example
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    df = pd.read_parquet(run / "results.parquet")
    assert set(df["status"]) == {"ok"}
    pairs = [("level0", "operators.op", "matmul", "my_matmul", "time", "correctness", None),
             ("level1", "model.name", "mlp", "tiny_mlp", "inference_latency", "output_check", None),
             ("level2", "train.optimizer", "sgd", "my_sgd", "step_time", "optimizer_check", "test_accuracy"),
             ("level2", "dataset.name", "digits", "my_digits", "step_time", "optimizer_check", "test_accuracy"),
             ("level2", "train.schedule", "constant", "warmup", "step_time", "optimizer_check", "test_accuracy"),
             ("level3", "distributed.strategy", "allreduce", "fp16", "time_per_step_s", None, "final_loss"),
             ("level3", "distributed.strategy", "allreduce", "topk", "time_per_step_s", None, "final_loss")]
    for stage, axis, builtin, user, timing, verdict, quality in pairs:
        for value in (builtin, user):
            t = _value(df, stage, timing, **{axis: value})
            assert t["kind"] == "timing" and t["ci_low"] <= t["value"] <= t["ci_high"], (stage, value)
            if verdict:
                assert _value(df, stage, verdict, **{axis: value})["text"] == "pass", (stage, value, verdict)
            if quality:
                assert pd.notna(_value(df, stage, quality, **{axis: value})["value"])
    assert _value(df, "level0", "compare_to", **{"operators.op": "my_matmul"})["text"] == "matmul"
    assert pd.notna(_value(df, "level0", "time_bwd", **{"operators.op": "my_matmul"})["value"])
    assert _value(df, "level2", "balanced_accuracy", **{"train.optimizer": "my_sgd"})["value"] > 0.5
    for strategy in ("allreduce", "fp16", "topk"):
        counted = _value(df, "level3", "comm_payload_bytes_per_rank_step", **{"distributed.strategy": strategy})
        expected = _value(df, "level3", "comm_expected_payload_bytes_per_rank_step",
                          **{"distributed.strategy": strategy})
        assert abs(counted["value"] / expected["value"] - 1) <= 0.05
    assert _value(df, "level3", "matches_serial", **{"distributed.strategy": "allreduce"})["text"] == "pass"
    report = (run / "report.md").read_text()
    assert "my_sgd vs sgd" in report  # the report's fair comparison of the optimizers
    assert (run / "code" / "mypkg" / "optim.py").is_file() and (run / "code" / "index.json").is_file()


@pytest.mark.slow
@pytest.mark.mpi
def test_editing_one_module_reruns_exactly_its_points(example: tuple[Path, Path, Any]) -> None:
    work, run, r = example
    assert r.returncode == 0
    records = {p: p.stat().st_mtime_ns for p in (run / "points").rglob("*.json")}
    optim = work / "byo" / "mypkg" / "optim.py"
    optim.write_text(optim.read_text() + "\n# edited: a new version of the optimizer's source\n")
    plan = _cli("plan", "byo", "repetitions=1", "--config-dir", "byo/conf", "--allow", "mypkg", "--out", str(run), cwd=work,
                pythonpath="byo")
    assert plan.returncode == 0, plan.stderr
    assert "2 points stale: source of mypkg.optim changed (mypkg/optim.py)" in plan.stdout
    again = _cli("run", "byo", "repetitions=1", "--config-dir", "byo/conf", "--allow", "mypkg", "--out", str(run), cwd=work,
                 pythonpath="byo")
    assert again.returncode == 0, again.stdout[-3000:]
    after = {p: p.stat().st_mtime_ns for p in (run / "points").rglob("*.json")}
    new = sorted(p.parent.name + "/" + p.name for p in set(after) - set(records))
    assert len(new) == 2 and all("my_sgd" in n for n in new), new  # the L2 and L3 points of my_sgd
    assert all(after[p] == t for p, t in records.items()), "a point that does not use mypkg.optim re-ran"
    assert "source of mypkg.optim changed" in again.stdout


@pytest.mark.slow
def test_reproduce_uses_the_bundled_code_once_allowed(example: tuple[Path, Path, Any]) -> None:
    work, _run, _r = example
    small = work / "small"
    r = _cli("run", "byo", "repetitions=1", "stages=[level0]", "--config-dir", "byo/conf", "--allow", "mypkg", "--out", str(small),
             cwd=work, pythonpath="byo")
    assert r.returncode == 0, r.stdout[-2000:]
    refused = _cli("reproduce", str(small), "--out", str(work / "again0"), cwd=work, pythonpath=None)
    assert refused.returncode == 2 and "mypkg" in refused.stderr and "outside the allow-list" in refused.stderr
    ok = _cli("reproduce", str(small), "--allow", "mypkg", "--out", str(work / "again"), cwd=work, pythonpath=None)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]  # mypkg came from the bundle's code/
