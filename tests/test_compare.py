"""``d5pipe compare A B``: shared points side by side, significance, --fail-on-regression."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from d5pipe.cli import cmd_compare
from d5pipe.provenance import bundle
from d5pipe.results.aggregate import aggregate
from d5pipe.results.compare import compare_runs, format_table, load_run, regressions
from d5pipe.rundir.record import Metric, record_path, write_record


def make_run(root: Path, name: str, slowdown: float, sizes: tuple[int, ...], seed: int) -> Path:
    """A run dir with real records and a real aggregated results.parquet (synthetic timing samples)."""
    run = root / name
    rng = np.random.default_rng(seed)
    for size in sizes:
        pid = f"mm-{size}"
        times = (slowdown * rng.lognormal(np.log(1e-4 * size), 0.1, size=40)).tolist()
        metrics = [  # like level0: the rate metric points at the time samples
            Metric("time", float(np.median(times)), "s", "timing", samples="time"),
            Metric("gflops", 2.0 * size**3 / float(np.median(times)) / 1e9, "GFLOP/s", "timing", samples="time"),
            Metric("checksum", f"c{size}", "", "deterministic"),
        ]
        write_record(record_path(run, "level0", pid), {
            "experiment": "demo", "stage": "level0", "point_id": pid, "params": {"operators.size": size},
            "seed": size, "status": "ok", "error": None, "metrics": [m.to_dict() for m in metrics],
            "samples": {"time": times}, "extra": {}, "env_hash": "x", "provenance": {},
        })
    write_record(record_path(run, "level0", "mm-broken"), {
        "experiment": "demo", "stage": "level0", "point_id": "mm-broken", "params": {"operators.size": 1},
        "seed": 1, "status": "failed", "error": "RuntimeError: boom", "metrics": [], "samples": {},
    })
    aggregate(run)
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "experiment": "demo"}))
    (run / "plan").mkdir(exist_ok=True)
    (run / "plan" / "index.json").write_text(json.dumps({
        "schema_version": 1, "experiment": "demo", "config_hash": "x", "datasets": {},
        "stages": {"level0": {"shards": [], "points": len(sizes) + 1, "axes": ["operators.size"]}}}))
    bundle.write_checksums(run)
    return run


def test_load_run_attaches_samples_and_params(tmp_path: Path) -> None:
    run = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    points = load_run(run)
    p = points[("level0", "mm-8")]
    assert p.params == {"operators.size": 8} and p.status == "ok"
    assert p.metrics["time"].samples is not None and len(p.metrics["time"].samples) == 40
    broken = points[("level0", "mm-broken")]
    assert broken.status == "failed" and broken.metrics == {} and "boom" in (broken.error or "")


def test_slowdown_is_a_significant_regression(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16, 32), seed=1)
    b = make_run(tmp_path, "b", 1.25, (8, 16, 64), seed=2)
    result = compare_runs(a, b)
    assert [p.point_id for p in result.points] == ["mm-16", "mm-8", "mm-broken"]
    assert result.only_ref == [("level0", "mm-32")] and result.only_new == [("level0", "mm-64")]
    found = regressions(result, 10.0)
    assert sorted((p.point_id, c.metric) for p, c in found) == [
        ("mm-16", "gflops"), ("mm-16", "time"), ("mm-8", "gflops"), ("mm-8", "time")]
    assert all(c.p_value is not None and c.p_value < 0.05 for _, c in found)
    assert regressions(result, 40.0) == []
    table = format_table(result)
    assert "changed (higher)" in table and "changed (lower)" in table and "1 only in A" in table


def test_same_distribution_is_no_regression(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    result = compare_runs(a, a)
    assert regressions(result, 0.0) == []
    assert all(c.verdict in ("reproduced", "not_compared") for p in result.points for c in p.comparisons)


def test_cli_fail_on_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    b = make_run(tmp_path, "b", 1.25, (8, 16), seed=2)
    archive_b = bundle.archive(b, tmp_path / "b.tar.gz")
    parser = argparse.ArgumentParser()
    cmd_compare.add_arguments(parser)
    out_json = tmp_path / "cmp.json"
    args = parser.parse_args([str(a), str(archive_b), "--fail-on-regression", "10", "--json", str(out_json)])
    assert cmd_compare.main(args) == 1
    assert "regression: level0/mm-8 time" in capsys.readouterr().err
    assert json.loads(out_json.read_text())["schema_version"] == 1
    assert cmd_compare.main(parser.parse_args([str(a), str(b), "--fail-on-regression", "40"])) == 0
    assert cmd_compare.main(parser.parse_args([str(b), str(a), "--fail-on-regression", "10"])) == 0
