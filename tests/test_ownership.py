"""Who may write a run directory (d5pipe.rundir.ownership.claim), in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.core.atomic import is_temp_of
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.ownership import OWNER_FILE, RunLock, claim


def test_an_empty_directory_is_claimed_and_another_experiment_refused(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    with RunLock(rd):
        claim(rd, "tiny")
    assert json.loads((tmp_path / OWNER_FILE).read_text())["experiment"] == "tiny"
    with RunLock(rd), pytest.raises(D5PipeError, match="belongs to experiment 'tiny', not 'other'"):
        claim(rd, "other")


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    rd = RunDir(tmp_path)
    with RunLock(rd), pytest.raises(D5PipeError, match="not empty and not a d5pipe run directory .*notes.txt"):
        claim(rd, "tiny")


def test_the_temp_file_of_a_driver_killed_while_claiming_is_not_foreign(tmp_path: Path) -> None:
    """A SIGKILL between the owner record's temp write and its rename (tests/test_failures.py saw
    it once) left a directory that the next run refused as not a d5pipe run."""
    leftover = tmp_path / ("." + OWNER_FILE + ".xyvuo7mu.tmp")
    leftover.write_text('{"schema_ver')
    assert is_temp_of(OWNER_FILE, leftover.name) and not is_temp_of(OWNER_FILE, "notes.txt")
    rd = RunDir(tmp_path)
    with RunLock(rd):
        claim(rd, "tiny")
    assert not leftover.exists()
    assert json.loads((tmp_path / OWNER_FILE).read_text())["experiment"] == "tiny"
