"""A full disk at any write: one line naming the path and the free space, exit 75, nothing half
written, and the same command completes once space exists (issue 56, item 2)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe.cli.main import main  # noqa: E402
from d5pipe.core.atomic import write_bytes, write_json  # noqa: E402
from d5pipe.core.errors import DiskFull  # noqa: E402
from d5pipe.execute.snakemake_run import Console  # noqa: E402
from d5pipe.rundir.layout import RunDir  # noqa: E402
from report_fixtures import RunSpec, make_run_dir  # noqa: E402
from tests.conftest import TEST_CONF, d5pipe  # noqa: E402


def test_a_full_disk_at_the_atomic_write_keeps_the_old_file_and_names_path_and_space(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.parquet"
    write_bytes(target, b"old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # where delayed allocation reports it
    with pytest.raises(DiskFull) as caught:
        write_bytes(target, b"new" * 1000)
    text = str(caught.value)
    assert caught.value.exit_code == 75 and str(target) in text and " free" in text and "re-run" in text
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]


@contextlib.contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mnt`` (root only; the test is skipped elsewhere), unmounted after."""
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only; skipped elsewhere)."""
    with tmpfs(tmp_path / "mnt", "4m") as mnt:
        yield mnt


@pytest.fixture
def run_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs, room for a small run directory (root only; skipped elsewhere)."""
    with tmpfs(tmp_path / "mnt", "64m") as mnt:
        yield mnt


def fill(fs: Path) -> Path:
    """Fill ``fs`` but for nothing: a file written until ENOSPC."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError as err:
            assert err.errno == errno.ENOSPC
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def test_report_on_a_full_tmpfs_ends_in_one_line_and_exit_75_then_resumes(
        small_fs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_fs / "run"
    planned = make_run_dir(run, RunSpec(levels=("level0",), failed=0, hostile=False, reproduce=False))
    write_json(run / "plan" / "index.json", {"schema_version": 1, "experiment": "synthetic", "datasets": {},
                                             "stages": {"level0": {"points": 12, "shards": ["s00000"]}}})
    write_json(run / "plan" / "level0" / "s00000.json", {"points": [{"point_id": p} for p in planned["level0"]]})
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    filler = fill(small_fs)
    assert main(["report", str(run)]) == 75
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("d5pipe: error: no space left to write " + str(run))
    assert "B free" in err and "re-run the same command to resume" in err and "Traceback" not in err
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # the records untouched, nothing half-written (no temp file, no partial parquet)
    filler.unlink()
    assert main(["report", str(run)]) == 0
    assert (run / "results.parquet").is_file() and (run / "warnings.parquet").is_file()
    assert (run / "report.html").is_file() and not [p for p in run.rglob("*.tmp")]


def starts(run: Path) -> Counter[str]:
    """How often the run's shards started each point (``shards/<stage>/<shard>.attempts``)."""
    return Counter(line for p in (run / "shards" / "level0").glob("*.attempts") for line in p.read_text().split())


def _fill_after_first_record(fs: Path, run: Path, done: threading.Event, filled: list[Path]) -> None:
    """Fill ``fs`` as soon as the run's first point record exists (the shard is then measuring its
    next point, which takes a timer budget: its record finds the disk full)."""
    while not done.is_set():
        if [p for p in (run / "points" / "level0").glob("*.json")]:
            filled.append(fill(fs))
            return
        time.sleep(0.01)


@pytest.mark.slow
def test_a_run_whose_disk_fills_mid_shard_ends_in_one_line_and_exit_75_then_resumes(run_fs: Path) -> None:
    """A real ``d5pipe run``: the disk fills between two points of its one shard (the shard job's
    record write, Snakemake's own writes and the driver's results all find it full)."""
    run = run_fs / "run"
    args = ["run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run), "shards.points_per_shard=3",
            "timer.budget_s=1", "timer.target_ci_pct=0.001", "timer.max_samples=100000"]
    done, filled = threading.Event(), []
    watcher = threading.Thread(target=_fill_after_first_record, args=(run_fs, run, done, filled), daemon=True)
    watcher.start()
    try:
        first = d5pipe(*args, timeout=300)
    finally:
        done.set()
        watcher.join(10)
    assert filled, "the run ended before its first record: " + first.stdout + first.stderr
    assert first.returncode == 75, first.stdout + first.stderr
    err = first.stderr
    assert "Traceback" not in err and err.count("\n") == 1, err
    # the write that found the disk full first: the record of the point measured after the fill
    assert err.startswith("d5pipe: error: no space left to write " + str(run / "points" / "level0") + "/"), err
    assert re.search(r"\.json \(\d+(\.\d)? (B|KiB|MiB) free\); .* re-run the same command to resume", err), err
    recorded = {p.name: p.read_bytes() for p in (run / "points" / "level0").glob("*.json")}
    assert 1 <= len(recorded) < 3, sorted(recorded)  # the disk filled between points
    assert all(json.loads(data)["status"] == "ok" for data in recorded.values())  # each record whole
    assert not [p for p in run.rglob("*.tmp")], "a temp file was left behind"
    assert starts(run) == Counter(name.removesuffix(".json") for name in recorded), \
        "a point whose record found no space still counts as a start towards shards.max_attempts"

    filled[0].unlink()
    second = d5pipe(*args, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    records = {p.name: json.loads(p.read_bytes()) for p in (run / "points" / "level0").glob("*.json")}
    assert len(records) == 3 and {r["status"] for r in records.values()} == {"ok"}
    assert all((run / "points" / "level0" / name).read_bytes() == data for name, data in recorded.items())
    assert starts(run) == Counter(name.removesuffix(".json") for name in records)  # each point started once
    assert (run / "results.parquet").is_file() and (run / "report.html").is_file()
    assert not [p for p in run.rglob("*.tmp")]


@pytest.mark.parametrize(("line", "named"), [
    ("WorkflowError:\n", None),
    ("Error recording metadata for finished job ([Errno 28] No space left on device). Please ensure write "
     "permissions for the directory {run}/.snakemake\n", "{run}/.snakemake"),
    ("OSError: [Errno 28] No space left on device: '.snakemake/incomplete/c2hh'\n", "{run}/.snakemake/incomplete/c2hh"),
    ("OSError: [Errno 122] Disk quota exceeded\n", "{run}"),
    ("Command 'set -euo pipefail; python -m d5pipe.execute.jobs' returned non-zero exit status 75.\n", "{run}"),
])
def test_snakemake_finding_the_disk_full_is_the_one_line_naming_its_path(
        tmp_path: Path, line: str, named: str | None) -> None:
    """Snakemake's own writes (metadata, incomplete markers under .snakemake) that find no space:
    the driver's line names the path Snakemake names (relative ones in the run directory), else the
    run directory; a job's own DiskFull line wins over them."""
    write_json(tmp_path / "plan" / "index.json", {"schema_version": 1, "experiment": "synthetic", "datasets": {},
                                                  "stages": {}})
    console = Console(RunDir.of(tmp_path), verbose=False, out=io.StringIO())
    console.feed(line.format(run=tmp_path))
    if named is None:
        assert console.disk_full is None
        return
    assert console.disk_full is not None
    assert console.disk_full.startswith(f"no space left to write {named.format(run=tmp_path)} (")
    assert console.disk_full.endswith("re-run the same command to resume (nothing finished is lost)")
    console.feed(f"d5pipe: error: no space left to write {tmp_path}/points/level0/p.json (0 B free); re-run\n")
    assert console.disk_full == f"no space left to write {tmp_path}/points/level0/p.json (0 B free); re-run"
