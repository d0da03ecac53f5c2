"""Each process parses each file of a run directory at most once (docs/architecture.md, "The walk
of one grid point"): a real run through Snakemake, its no-op re-run, ``d5pipe status`` and
``d5pipe report``, with every Python process -- the driver, Snakemake and its report job, the
shard jobs -- logging the files it opens for reading (tests/read_audit/sitecustomize.py)."""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import TEST_CONF, d5pipe

pytestmark = pytest.mark.slow

AUDIT = Path(__file__).parent / "read_audit"
# Byte-level helpers that read without parsing: compare-before-write (unchanged files keep their
# mtime), the seal's sha256 and fsync before the shard marker.
NOT_PARSING = ("d5pipe/core/atomic.py:",)


def _audited(log: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return d5pipe(*args, env={"PYTHONPATH": os.pathsep.join([str(AUDIT), os.environ.get("PYTHONPATH", "")]),
                              "D5PIPE_READ_AUDIT_ROOT": str(root), "D5PIPE_READ_AUDIT_LOG": str(log),
                              "D5PIPE_CACHE_DIR": str(root / "cache")})  # a dataset is prepared, not taken from a cache


def _parses(log: Path) -> dict[tuple[str, str], list[str]]:
    """(pid, file) -> the d5pipe call chains that opened it for reading."""
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in log.read_text().splitlines():
        pid, path, chain = line.split("\t")
        if chain.startswith("d5pipe/") and not chain.startswith(NOT_PARSING):
            seen[(pid, path)].append(chain)
    return seen


def test_each_process_parses_each_run_file_once(tmp_path: Path) -> None:
    run, images, log = tmp_path / "run", tmp_path / "images", tmp_path / "reads.log"
    steps = [("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run)),
             ("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run)),  # nothing to do
             ("status", str(run)), ("report", str(run)),
             ("run", "lazy_images", "--config-dir", str(TEST_CONF), "--out", str(images))]  # a dataset, level 1
    for args in steps:
        r = _audited(log, tmp_path, *args)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    seen = _parses(log)
    twice = {f"{pid} {Path(path).relative_to(tmp_path)}": chains for (pid, path), chains in seen.items()
             if len(chains) > 1}
    assert not twice, "parsed more than once in one process:\n" + "\n".join(
        f"{k}:\n  " + "\n  ".join(v) for k, v in twice.items())
    # the audit saw the walk: the shard jobs and the report job parsed the plan, config and records
    names = {str(Path(path).relative_to(tmp_path)) for _, path in seen}
    assert {"run/config.yaml", "run/plan/index.json", "run/plan/level0/s00000.json", "run/manifest.json",
            "images/config.yaml"} <= names
    assert any(n.startswith("images/data/synthetic_images-") for n in names)
    records = [(pid, p) for pid, p in seen if "/points/level0/" in p]
    assert len(records) >= 3 * 3  # each record: its shard job, the report job, status, report
