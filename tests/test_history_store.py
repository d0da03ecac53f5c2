"""The history store (d5pipe.history.store): a finished run lands in it, two runs that finish at
the same moment both land, bundles are imported, and the queries and the check read it back
(``d5pipe history``). Real runs of the tiny experiment, a real DuckDB file."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from d5pipe.history.store import add_run_dir
from tests.conftest import TEST_CONF, d5pipe


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny run (two repetitions) that adds itself to a store of its own; (run dir, store)."""
    base = tmp_path_factory.mktemp("history")
    store = base / "h.duckdb"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(base / "run"), "repetitions=2",
               "--history", str(store), env={"D5PIPE_HISTORY": None})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"in {store}" in r.stdout
    return base / "run", store


def _count(store: Path, sql: str) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute(sql).fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


def _copy_as_another_run(src: Path, dst: Path, created: str) -> Path:
    """The same results as another run: another creation time, so another run ID."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["created"] = created
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


_START: Any = None
"""The barrier the appending processes wait at (set in each by :func:`_ready`)."""


def _ready(barrier: Any) -> None:
    global _START
    _START = barrier


def _append(args: tuple[str, str]) -> str:
    _START.wait(timeout=120)  # every process is up and about to open the store: they go together
    run_id, _ = add_run_dir(Path(args[0]), Path(args[1]))
    return run_id


def test_a_finished_run_lands_once_with_its_rows(tiny_run: tuple[Path, Path]) -> None:
    run, store = tiny_run
    assert _count(store, "SELECT count(*) FROM runs") == 1
    n = _count(store, "SELECT count(*) FROM results")
    assert n > 0
    assert _count(store, "SELECT count(DISTINCT repeat) FROM results") == 2
    r = d5pipe("history", "import", str(run), "--history", str(store))
    assert r.returncode == 0 and "already in the history" in r.stdout, r.stdout + r.stderr
    assert _count(store, "SELECT count(*) FROM results") == n  # nothing twice


def test_two_runs_appending_at_once_both_land(tiny_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = tiny_run
    store = tmp_path / "race.duckdb"
    runs = [_copy_as_another_run(run, tmp_path / f"r{i}", f"2026-01-0{i + 1}T00:00:00+00:00") for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    # four processes open the store at the same moment (a blocked worker takes no second task, so
    # each takes one); without the store's lock, DuckDB refuses all but one of them
    with ctx.Pool(4, initializer=_ready, initargs=(barrier,)) as pool:
        ids = pool.map(_append, [(str(store), str(r)) for r in runs], chunksize=1)
    assert len(set(ids)) == 4
    assert _count(store, "SELECT count(DISTINCT run_id) FROM runs") == 4
    assert _count(store, "SELECT count(DISTINCT run_id) FROM results") == 4


def test_a_bundle_is_imported_and_queried(tiny_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = tiny_run
    copy = _copy_as_another_run(run, tmp_path / "copy", "2026-02-01T00:00:00+00:00")
    assert d5pipe("bundle", str(copy), "--archive", "--rehash").returncode == 0  # its manifest was edited
    archive = next(tmp_path.glob("copy*.tar.gz"))
    store = tmp_path / "b.duckdb"
    r = d5pipe("history", "import", str(archive), "--history", str(store))
    assert r.returncode == 0 and " added " in r.stdout, r.stdout + r.stderr
    s = d5pipe("history", "series", "--metric", "time", "--param", "operators.size=16", "--history", str(store))
    assert s.returncode == 0 and '{"operators.size":16}' in s.stdout, s.stdout + s.stderr
    lines = [ln for ln in s.stdout.splitlines() if "operators.size" in ln]
    assert len(lines) == 1 and lines[0].split()[-3] == "2"  # one run, its two repetitions folded
    c = d5pipe("history", "check", "--history", str(store), "--junit", str(tmp_path / "h.xml"))
    assert c.returncode == 0, c.stderr
    assert "inconclusive" in c.stdout and "1 run(s): a step needs 2 runs on each side" in c.stdout
    assert (tmp_path / "h.xml").read_text().count("<skipped") >= 3
    t = d5pipe("history", "trend", "--history", str(store), "--html", str(tmp_path / "trend.html"))
    assert t.returncode == 0, t.stderr
    page = (tmp_path / "trend.html").read_text()
    assert page.index("Findings") < page.index("<svg") and "No confirmed step." in page  # findings first


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    missing = d5pipe("history", "check", "--history", str(tmp_path / "none.duckdb"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such store" in missing.stderr
    bad = d5pipe("history", "check", "--since", "yesterday", "--history", str(tmp_path / "none.duckdb"))
    assert bad.returncode == 2 and "--since" in bad.stderr
    notrun = d5pipe("history", "import", str(tmp_path), "--history", str(tmp_path / "x.duckdb"))
    assert notrun.returncode == 2 and notrun.stderr.count("\n") == 1, notrun.stderr


def test_a_store_that_cannot_be_written_is_a_warning_not_a_failed_run(
        tiny_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.cli.cmd_history import append_finished_run

    monkeypatch.delenv("D5PIPE_HISTORY")  # the suite's "off" (tests/conftest.py)
    run, _ = tiny_run
    append_finished_run(run, tmp_path)  # a directory, not a DuckDB file
    out = capsys.readouterr().out
    assert "warning: the run was not added to the history" in out and "d5pipe history import" in out


def test_a_series_is_the_points_config_not_where_it_ran_nor_its_code() -> None:
    """The same point config is one series whatever ran it (executor, threads, user code); another
    value of a key the point reads, swept or not, is another series."""
    from d5pipe.history.run_rows import series_key, stage_config

    def key_of(config: dict, params: dict) -> str:
        return series_key("tiny", "level0", params, stage_config(config, "level0"))

    cfg = {"name": "tiny", "seed": 42, "timer": {"budget_s": 0.2}, "operators": {"op": "matmul", "size": 16},
           "executor": {"resources": {"level0": {"cpus_per_task": 1}}}}
    params = {"operators.size": 32}
    key = key_of(cfg, params)
    elsewhere = {**cfg, "executor": {"resources": {"level0": {"cpus_per_task": 2}}}}
    assert key_of(elsewhere, params) == key
    assert key_of(cfg, {**params, "repeat": 1}) == key
    longer = {**cfg, "timer": {"budget_s": 2.0}}  # not swept, but the point measures otherwise
    assert key_of(longer, params) != key
    assert key_of(cfg, {"operators.size": 48}) != key


def test_a_store_of_another_schema_is_a_one_line_error(tmp_path: Path) -> None:
    store = tmp_path / "old.duckdb"
    con = duckdb.connect(str(store))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.close()
    r = d5pipe("history", "runs", "--history", str(store))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "schema_version 1" in r.stderr, r.stderr


def test_a_run_records_the_slurm_cluster_its_points_ran_on(tiny_run: tuple[Path, Path], tmp_path: Path) -> None:
    from d5pipe.history.run_rows import run_rows

    run, _ = tiny_run
    copy = _copy_as_another_run(run, tmp_path / "on_slurm", "2026-03-01T00:00:00+00:00")
    for rec_path in (copy / "points").glob("*/*.json"):  # as the shard jobs of a SLURM run write them
        rec = json.loads(rec_path.read_text())
        rec["provenance"].update(slurm_job_id="77", slurm_nodelist="node[1-2]", slurm_cluster="hpc1")
        rec_path.write_text(json.dumps(rec))
    df = pd.read_parquet(copy / "results.parquet")
    df["slurm_job_id"] = "77"
    df.to_parquet(copy / "results.parquet", index=False)
    row, _ = run_rows(copy)
    assert (row["slurm_jobs"], row["slurm_nodes"], row["slurm_cluster"]) == ("77", "node[1-2]", "hpc1")
