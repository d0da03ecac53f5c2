"""The results of a run in one pass: the report job reads each record once, computes the point
verdicts once, writes results.parquet once and never reads it back; ``d5pipe status`` and
``d5pipe report`` do the same; a finished run's results.parquet has one reader."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from d5pipe.core.atomic import write_json
from d5pipe.results import collect, columns, run_results, verdicts
from d5pipe.rundir import record
from d5pipe.rundir.layout import RunDir
from tests.report_fixtures import RunSpec, make_run_dir


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of: records parsed, records read another way, point-verdict passes, results.parquet
    writes and reads (any reader: pyarrow, pandas or d5pipe's own)."""
    calls: Counter[str] = Counter()

    def spy(module: Any, name: str, key: str, when: Any = None) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if when is None or when(*args, **kwargs):
                calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    def results_file(path: Any, *_: Any, **__: Any) -> bool:
        return Path(str(path)).name == "results.parquet"

    spy(collect, "parse_record", "records parsed")
    spy(record, "read_record", "records read elsewhere")
    spy(verdicts, "point_verdicts", "point verdicts")
    spy(run_results, "point_verdicts", "point verdicts")
    spy(run_results, "write_frame", "results.parquet written", lambda df, path: results_file(path))
    spy(pq, "read_table", "results.parquet read", results_file)
    spy(pd, "read_parquet", "results.parquet read", results_file)
    return calls


def _run(tmp_path: Path) -> tuple[Path, int]:
    """A synthetic run with a plan of its points (one shard per stage) and one planned point
    that never ran."""
    run = tmp_path / "run"
    planned = make_run_dir(run, RunSpec(levels=("level0", "level2", "level3"), failed=1, skipped=1, hostile=False))
    planned["level0"].append("never-ran")
    rd = RunDir(run)
    write_json(rd.index_path, {"stages": {s: {"shards": ["s0"]} for s in planned}})
    for stage, ids in planned.items():
        write_json(rd.shard_plan(stage, "s0"), {"points": [{"point_id": pid} for pid in ids]})
    return run, sum(len(ids) for ids in planned.values())


def test_the_report_job_reads_each_record_once_and_writes_results_once(tmp_path: Path, counted: Counter[str]) -> None:
    from d5pipe.execute.jobs import write_outputs

    run, n = _run(tmp_path)
    verdict = write_outputs(run)
    assert counted == {"records parsed": n - 1, "point verdicts": 1, "results.parquet written": 1}
    assert verdict.points == n and verdict.not_run == 1
    assert (run / "report.html").is_file() and (run / "verdict.json").is_file()
    summary = pd.read_parquet(run / "summary_level0.parquet")  # written after the checks: with verdicts
    assert "verdict" in summary.columns and summary["verdict"].notna().all()


def test_status_and_report_read_each_record_once_and_never_results_parquet(
        tmp_path: Path, counted: Counter[str], capsys: pytest.CaptureFixture[str]) -> None:
    from d5pipe.cli import cmd_report, cmd_status

    run, n = _run(tmp_path)
    assert cmd_status.main(argparse.Namespace(run_dir=run, junit=tmp_path / "junit.xml")) == 3
    assert counted == {"records parsed": n - 1, "point verdicts": 1}
    lines = capsys.readouterr().out.splitlines()
    level0 = next(ln.split() for ln in lines if ln.startswith("level0"))
    assert level0[-1] == "1"  # the planned point without a record is pending
    counted.clear()
    assert cmd_report.main(argparse.Namespace(run_dir=run)) == 0
    assert counted == {"records parsed": n - 1, "point verdicts": 1, "results.parquet written": 1}
    counted.clear()
    df = columns.load_results(run)
    assert counted == {"results.parquet read": 1} and df["verdict"].notna().all()
