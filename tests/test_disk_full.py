"""A full disk at any write: one line naming the path and the free space, exit 75, nothing half
written, and the same command completes once space exists (issue 56, item 2)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe.cli.main import main  # noqa: E402
from d5pipe.core.atomic import write_bytes, write_json  # noqa: E402
from d5pipe.core.errors import DiskFull  # noqa: E402
from report_fixtures import RunSpec, make_run_dir  # noqa: E402


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


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only; skipped elsewhere)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


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
