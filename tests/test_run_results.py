"""The results pass (d5pipe.results.run_results): exact rows and columns, failed points keep their error, planned-ID restriction."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe import D5PipeError  # noqa: E402
from d5pipe.results.columns import FIXED_COLUMNS  # noqa: E402
from d5pipe.rundir.record import read_record  # noqa: E402
from report_fixtures import GRIDS, HOSTILE, RunSpec, grid_points, make_run_dir, publish, scale_point_time  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    run_dir = tmp_path_factory.mktemp("agg")
    planned = make_run_dir(run_dir, RunSpec(levels=("level0", "level3"), failed=2, skipped=1))
    return run_dir, planned


def derived(df: pd.DataFrame) -> pd.Series:
    """Rows the results pass adds to the records' rows: checks, level 3's scaling, speedups."""
    return df["metric"].str.startswith(("acceptance:", "plausibility:", "speedup")) | (df["metric"] == "efficiency")


def expected_rows(run_dir: Path) -> int:
    n = 0
    for path in (run_dir / "points").glob("*/*.json"):
        rec = read_record(path)
        n += len(rec["metrics"]) if rec["status"] == "ok" and rec["metrics"] else 1
    return n


def test_exact_columns_and_rows(run: tuple[Path, dict[str, list[str]]]) -> None:
    run_dir, planned = run
    path = publish(run_dir)
    assert path == run_dir / "results.parquet"
    df = pd.read_parquet(path)
    axes = sorted({*GRIDS["level0"], *GRIDS["level3"]})
    assert list(df.columns) == [*FIXED_COLUMNS, "slurm_job_id", *axes, "verdict"]
    assert df["slurm_job_id"].isna().all()  # a local run has no SLURM job
    assert len(df[~derived(df)]) == expected_rows(run_dir)  # the records' rows, then the checks and speedups
    assert set(df["stage"]) == {"level0", "level3"}
    assert df.groupby("stage")["point_id"].nunique().to_dict() == {s: len(v) for s, v in planned.items()}
    schema = pq.read_schema(path)
    assert str(schema.field("value").type) == "double"
    assert str(schema.field("seed").type) == "int64"
    assert str(schema.field("distributed.ranks").type) == "int64"
    # one (point, metric) row each; numbers in value, strings in text, bools in both
    assert not df.duplicated(["stage", "point_id", "metric"]).any()
    correct = df[df["metric"] == "correct"]
    assert correct["value"].isna().all() and set(correct["text"]) <= {"pass", "fail"}
    tm = df[df["metric"] == "target_met"]
    assert set(tm["value"]) <= {0.0, 1.0} and set(tm["text"]) <= {"true", "false"}
    # every value equals the record's value, CI included
    some = df[(df["stage"] == "level3") & (df["metric"] == "time_per_step_s")].iloc[0]
    rec = read_record(run_dir / "points" / "level3" / f"{some['point_id']}.json")
    m = next(m for m in rec["metrics"] if m["name"] == "time_per_step_s")
    assert (some["value"], some["ci_low"], some["ci_high"]) == (m["value"], m["ci_low"], m["ci_high"])
    assert some["distributed.ranks"] == rec["params"]["distributed.ranks"]
    assert some["seed"] == rec["seed"] and some["env_hash"] == rec["env_hash"]
    assert pd.isna(some["operators.size"])  # axis of another stage


def test_failed_and_skipped_points_keep_error(run: tuple[Path, dict[str, list[str]]]) -> None:
    run_dir, _ = run
    df = pd.read_parquet(publish(run_dir))
    bad = df[df["status"] != "ok"]
    assert sorted(bad["status"]) == ["failed", "failed", "skipped"]
    assert (bad["metric"] == "status").all()
    assert bad["value"].isna().all()
    assert list(bad["text"]) == list(bad["status"])
    failed = bad[bad["status"] == "failed"]
    assert all(HOSTILE in e and e.startswith("RuntimeError: boom") for e in failed["error"])
    assert bad.loc[bad["status"] == "skipped", "error"].item() == "fp16 unsupported on this CPU"
    recorded = ~df["metric"].str.startswith(("acceptance:", "plausibility:"))  # checks carry their evidence
    assert df.loc[(df["status"] == "ok") & recorded, "error"].isna().all()


def test_planned_ids_restrict_and_missing_records(run: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    run_dir, planned = run
    chosen = {"level3": planned["level3"][:3] + ["ffffffffffffffff"]}
    out = publish(run_dir, chosen)
    df = pd.read_parquet(out)
    assert set(df["stage"]) == {"level3"}
    assert set(df["point_id"]) == set(chosen["level3"])
    missing = df[df["point_id"] == "ffffffffffffffff"]
    assert len(missing) == 1 and missing["status"].item() == "skipped"
    assert "no record" in missing["error"].item()
    assert len(df[~derived(df)]) == 3 * 5 + 1  # three ok level3 points with 5 metrics each + the missing one
    assert (run_dir / "summary_level3.parquet").exists()


def test_summary_and_side_tables(run: tuple[Path, dict[str, list[str]]]) -> None:
    run_dir, planned = run
    publish(run_dir)
    summ = pd.read_parquet(run_dir / "summary_level3.parquet")
    assert len(summ) == len(planned["level3"])
    assert {"point_id", "status", "distributed.ranks", "time_per_step_s", "busbw_GBps"} <= set(summ.columns)
    s0 = pd.read_parquet(run_dir / "summary_level0.parquet")
    assert set(s0.loc[s0["status"] == "ok", "correct"]) <= {"pass", "fail"}
    warns = pd.read_parquet(run_dir / "warnings.parquet")
    assert list(warns.columns) == ["stage", "point_id", "kind", "message", "value", "ci_low", "ci_high", "hard"]
    # the records' "ranks exceed cores" is the measured oversubscribed row's kind: one row per point
    over = warns[warns["kind"] == "oversubscribed"]
    assert set(over["stage"]) == {"level3"} and over["message"].str.startswith("oversubscribed = 1").all()
    assert len(over) == sum(1 for p in grid_points(GRIDS["level3"]) if p["distributed.ranks"] > 2)


def test_the_report_shows_exactly_the_warnings_of_warnings_parquet_outlier_repetitions_included(
        tmp_path: Path) -> None:
    """One repetition of three 400x its siblings: a row of warnings.parquet (kind, message, the
    factor as its value), and the report's Warnings are that same list, row for row."""
    from d5pipe.results.report import build_report
    from d5pipe.results.report.loader import report_data
    from d5pipe.results.report.verdict_sections import collect_warnings
    from d5pipe.results.run_results import build_results, write_results
    from d5pipe.results.run_warnings import from_frame

    make_run_dir(tmp_path, RunSpec(levels=("level0",), failed=0, hostile=False, reproduce=False, grids={
        "level0": {"operators.size": [64], "operators.impl": ["eager"], "repeat": [0, 1, 2]}}))
    slow = scale_point_time(tmp_path, "level0", {"repeat": 1}, "time", 400.0)
    res = build_results(tmp_path)
    write_results(res)
    build_report(res)
    parquet = from_frame(pd.read_parquet(tmp_path / "warnings.parquet"))
    assert collect_warnings(report_data(res)) == parquet  # the report lists the parquet's rows
    outliers = [w for w in parquet if w.kind == "outlier_repetition"]
    assert [(w.stage, w.point_id) for w in outliers] == [("level0", slow)]
    assert outliers[0].value == pytest.approx(400.0, rel=0.1) and "repetition 1" in outliers[0].message
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="warnings-outlier_repetition"' in html and outliers[0].message.split(" took ")[0] in html


def test_curves_side_table(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level2",), failed=0, hostile=False))
    publish(tmp_path)
    curves = pd.read_parquet(tmp_path / "curves.parquet")
    assert set(curves["series"]) == {"train_loss", "test_accuracy"}
    assert len(curves) == 3 * 2 * 6  # points x series x epochs


def test_atomic_write_leaves_no_temp_and_tolerates_bad_records(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level1",), failed=0, hostile=False))
    (tmp_path / "points" / "level1" / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "points" / "level1" / "partial.json").write_text(
        json.dumps({"schema_version": 1, "status": "ok", "metrics": [{"name": "x", "value": 1}]}),
        encoding="utf-8")
    df = pd.read_parquet(publish(tmp_path))
    broken = df[df["point_id"] == "broken"]
    assert broken["status"].item() == "failed" and "unreadable record" in broken["error"].item()
    partial = df[df["point_id"] == "partial"]
    assert partial["value"].item() == 1.0 and partial["unit"].item() == ""
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_record_of_an_unknown_schema_version_is_a_one_line_error(tmp_path: Path) -> None:
    from d5pipe.rundir.record import RecordVersionError

    make_run_dir(tmp_path, RunSpec(levels=("level1",), failed=0, hostile=False))
    (tmp_path / "points" / "level1" / "future.json").write_text(
        json.dumps({"schema_version": 99, "status": "ok", "metrics": []}), encoding="utf-8")
    with pytest.raises(RecordVersionError, match=r"future.json: record schema_version 99 is not one"):
        publish(tmp_path)


def test_missing_run_dir_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="does not exist"):
        publish(tmp_path / "nope")
