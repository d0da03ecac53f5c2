"""Prepared datasets are shared by run directories through the user cache (d5pipe.rundir.data_cache)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from d5pipe.rundir import data_cache
from tests.conftest import TEST_CONF, d5pipe

LEVEL1 = ("tiny", "--config-dir", str(TEST_CONF), "stages=[level1]", "level1.batch_size=8", "level1.peak=false",
          "level1.measure_memory=false")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("D5PIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("D5PIPE_DATA_CACHE_MB", "64")
    return tmp_path / "cache" / "data"


def test_a_second_run_of_the_same_dataset_prepares_nothing(tmp_path: Path, cache: Path) -> None:
    t0 = time.perf_counter()
    first = d5pipe("run", *LEVEL1, "--out", str(tmp_path / "a"))
    t_first = time.perf_counter() - t0
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    [meta_a] = (tmp_path / "a" / "data").glob("*.json")
    assert "from_cache" not in json.loads(meta_a.read_text())
    assert (cache / meta_a.name).is_file()  # the job stored what it prepared
    t0 = time.perf_counter()
    second = d5pipe("run", *LEVEL1, "--out", str(tmp_path / "b"))
    t_second = time.perf_counter() - t0
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "1 dataset(s) from the cache" in second.stdout and "no prepare_data job" in second.stdout
    log = (tmp_path / "b" / "logs" / "snakemake.log").read_text()
    assert "rule prepare_data" not in log and "prepare_data" not in (tmp_path / "b" / "logs").iterdir().__repr__()
    meta_b = json.loads((tmp_path / "b" / "data" / meta_a.name).read_text())
    assert meta_b["checksum"] == json.loads(meta_a.read_text())["checksum"]  # the run records which data
    assert meta_b["from_cache"]["path"] == str(cache / meta_a.with_suffix(".npz").name)
    print(f"\nfirst run (prepares the dataset): {t_first:.1f} s; second run (from the cache): {t_second:.1f} s; "
          f"saved {t_first - t_second:.1f} s")


def test_a_damaged_entry_is_not_used_and_the_cache_stays_within_its_limit(tmp_path: Path, cache: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "x.npz"
    for i, key in enumerate(("old-1", "mid-2", "new-3")):
        src.write_bytes(os.urandom(400_000))
        data_cache.store(key, src, {"key": key, "checksum": key}, 1.0)
        os.utime(cache / f"{key}.npz", (1000 + i, 1000 + i))  # a clear order of last use
    assert [k for k, _, _ in data_cache.entries()] == ["new-3", "mid-2", "old-1"]
    assert data_cache.evict(900_000) == ["old-1"]  # least recently used first
    (cache / "mid-2.npz").write_bytes(b"not what was stored")
    assert data_cache.restore("mid-2", tmp_path / "run" / "data") is None
    got = data_cache.restore("new-3", tmp_path / "run" / "data")
    assert got is not None and (tmp_path / "run" / "data" / "new-3.npz").stat().st_size == 400_000
    monkeypatch.setenv("D5PIPE_DATA_CACHE_MB", "0")  # off
    assert data_cache.restore("new-3", tmp_path / "other") is None
    monkeypatch.setenv("D5PIPE_DATA_CACHE_MB", "64")
    r = d5pipe("cache")
    assert r.returncode == 0 and "2 dataset(s)" in r.stdout and "new-3" in r.stdout
    assert d5pipe("cache", "--clear").stdout.startswith("removed 2 cached dataset(s)")
    assert data_cache.entries() == []
    monkeypatch.setenv("D5PIPE_DATA_CACHE_MB", "lots")
    bad = d5pipe("cache")
    assert bad.returncode == 2 and "D5PIPE_DATA_CACHE_MB" in bad.stderr
