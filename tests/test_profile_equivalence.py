"""Profiling on against off, as an A/A test (issue 53): the profiled pass runs after the timed one,
so the same points with ``profile.enabled`` off (A) and on (B), measured interleaved by ``d5pipe
ab``, must come out equivalent. It decides an equivalence of timings, so it runs in make test's
quiet lane (scripts/run_tests.sh), alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TEST_CONF, d5pipe
from tests.test_profiles import ENV


@pytest.mark.slow
def test_profiling_on_against_off_in_an_interleaved_ab_leaves_the_timings_equivalent(tmp_path: Path) -> None:
    """An A/A test of the profiled pass: the same points with ``profile.enabled`` off (A) and on (B),
    measured interleaved by ``d5pipe ab`` until decided: every timing comes out equivalent within
    the default margin, none changed -- the pass runs after the timed one and leaves it as it was."""
    conf = ["--config-dir", str(TEST_CONF), "sweep.grid.operators.size=[96]", "repetitions=3"]
    sides = []
    for name, enabled in (("off", "false"), ("on", "true")):
        out = tmp_path / name
        r = d5pipe("run", "profiled", *conf, f"profile.enabled={enabled}", "--dry-run", "--out", str(out), env=ENV)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        sides.append(str(out))
    r = d5pipe("ab", *sides, "--out", str(tmp_path / "ab"), "--allow", "profile_ops", "--max-repetitions", "12",
               "--budget", "300", env=ENV, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert data["interleaved"] and data["paired"]
    timings = [t for p in data["comparison"]["points"] for t in p["timings"] if not t["derived_from"]]
    assert timings and all(t["verdict"] == "equivalent" for t in timings), r.stdout[-3000:]
    assert (tmp_path / "ab" / "b" / "profile.parquet").is_file() and not (tmp_path / "ab" / "a" / "profile.parquet").exists()
