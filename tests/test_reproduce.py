"""reproduce(): checksums first, environment comparison, re-run, metric-by-metric verdict.

The bundle is hand-made but real: point records in the architecture's format, ``results.parquet``
written by the real aggregator (d5pipe.results.aggregate), a manifest with this machine's environment
record, and real checksums. The ``rerun`` callables write real run directories the same way
(copying the bundle's records, optionally perturbed), since the pipeline's own re-run is wired by
the CLI.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from d5pipe import D5PipeError
from d5pipe.cli import cmd_reproduce
from d5pipe.core.outcome import Metric
from d5pipe.core.seeds import point_seed
from d5pipe.provenance import bundle
from d5pipe.provenance import environment as envinfo
from d5pipe.provenance.reproduce import reproduce
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import write_record
from tests.report_fixtures import publish

POINTS = ("mm-64-a1b2c3", "mm-128-d4e5f6", "mm-256-0718ab")


REPS = 3
"""Each point measured in three repetitions (axis ``repeat``): timings are compared across them."""


def _rep_id(pid: str, rep: int) -> str:
    return pid if rep == 0 else f"{pid}-r{rep}"


def _record(pid: str, size: int, rng: np.random.Generator, rep: int = 0) -> dict[str, Any]:
    level = 1e-4 * size / 64 * float(rng.lognormal(0.0, 0.05))  # between-process noise
    times = rng.lognormal(mean=np.log(level), sigma=0.1, size=30).tolist()  # synthetic samples
    metrics = [
        Metric("time", float(np.median(times)), "s", "timing", min(times), max(times), samples="time"),
        Metric("max_abs_error", 1e-7 * size, "", "numerical"),
        Metric("checksum", f"sha-{size}", "", "deterministic"),
        Metric("correct", "pass", "", "verdict"),
        Metric("reps", 30, "", "count"),
        Metric("device", "cpu", "", "info"),
    ]
    return {
        "experiment": "demo", "stage": "level0", "point_id": _rep_id(pid, rep),
        "params": {"operators.size": size, "repeat": rep},
        "seed": point_seed(0, "level0", _rep_id(pid, rep)), "status": "ok", "error": None,
        "metrics": [m.to_dict() for m in metrics], "samples": {"time": times}, "extra": {},
        "env_hash": envinfo.env_hash(), "provenance": {"hostname": "test"},
    }


def _write_manifest(run: Path, record: dict[str, Any] | None = None) -> None:
    # the submitting environment, recorded as d5pipe run records it (without importing torch)
    env = envinfo.environment_record(light=True) if record is None else record
    (run / "manifest.json").write_text(json.dumps(
        {"schema_version": 1, "experiment": "demo", "seed": 0, "environment": env,
         "env_hash": envinfo.env_hash(env)}))


def make_bundle(root: Path) -> Path:
    run = root / "bundle"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"name": "demo", "seed": 0}))
    _write_manifest(run)
    rng = np.random.default_rng(7)
    for pid, size in zip(POINTS, (64, 128, 256)):
        for rep in range(REPS):
            write_record(RunDir.of(run).record("level0", _rep_id(pid, rep)), _record(pid, size, rng, rep))
    publish(run)
    (run / "report.html").write_text("<html>demo</html>")
    bundle.write_checksums(run)
    return run


Perturb = Callable[[dict[str, Any]], None]


def copying_rerun(perturb: Perturb | None = None, drop: str | None = None,
                  calls: list[Path] | None = None) -> Callable[[Path, Path], None]:
    """A re-run that writes a real run dir from the bundle's records (optionally perturbed)."""

    def rerun(config_yaml: Path, out: Path) -> None:
        if calls is not None:
            calls.append(config_yaml)
        src = config_yaml.parent
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(config_yaml, out / "config.yaml")
        _write_manifest(out)
        for path in sorted((src / "points" / "level0").glob("*.json")):
            rec = json.loads(path.read_text())
            if rec["point_id"] == drop:
                continue
            if perturb is not None:
                perturb(rec)
            write_record(RunDir.of(out).record("level0", rec["point_id"]), rec)
        publish(out)

    return rerun


@pytest.fixture()
def bundle_dir(tmp_path: Path) -> Path:
    return make_bundle(tmp_path)


def test_identical_rerun_is_reproduced(bundle_dir: Path, tmp_path: Path) -> None:
    verdict = reproduce(bundle_dir, tmp_path / "out", False, copying_rerun())
    assert verdict.status == "reproduced" and verdict.exit_code == 0, verdict.failures
    report = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    assert report["schema_version"] == 2 and report["status"] == "reproduced" and report["reproduced"] is True
    assert len(report["points"]) == 3
    metrics = {m["metric"]: m for m in report["points"][0]["metrics"]}
    timings = {t["metric"]: t for t in report["points"][0]["timings"]}
    # the same values on both sides: a ratio of 1, never a change (equivalent when the repetitions'
    # spread fits the margin, else undecided: two separate runs are compared unpaired)
    assert timings["time"]["verdict"] in ("equivalent", "inconclusive") and timings["time"]["ratio"] == pytest.approx(1.0)
    assert "time" not in metrics and metrics["device"]["verdict"] == "not_compared"
    assert report["timing"]["changed"] == 0
    assert report["environment"]["reference_hash"] == report["environment"]["current_hash"]


def _slower_and_wrong(rec: dict[str, Any]) -> None:
    """Every repetition of POINTS[1] 30% slower; its first repetition's checksum wrong."""
    if rec["params"]["operators.size"] == 128:
        rec["samples"]["time"] = [1.3 * t for t in rec["samples"]["time"]]
        for m in rec["metrics"]:
            if m["name"] == "time":
                m["value"] *= 1.3
            if m["name"] == "checksum" and rec["point_id"] == POINTS[1]:
                m["value"] = "sha-other"


def test_perturbed_rerun_is_not_reproduced(bundle_dir: Path, tmp_path: Path) -> None:
    verdict = reproduce(bundle_dir, tmp_path / "out", False, copying_rerun(_slower_and_wrong))
    assert verdict.status == "not_reproduced" and verdict.exit_code == 3
    assert len(verdict.failures) == 1  # the checksum; a timing change alone only fails with strict_timing
    assert any(" checksum:" in f and "sha-other" in f for f in verdict.failures)
    timing = verdict.timing_changes[0]
    assert POINTS[1] in timing and " time: changed" in timing and "ratio 1.300" in timing
    report = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    by_point = {p["point_id"]: p["reproduced"] for p in report["points"]}
    assert by_point == {POINTS[0]: True, POINTS[1]: False, POINTS[2]: True}
    strict = reproduce(bundle_dir, tmp_path / "out2", False, copying_rerun(_slower_and_wrong), strict_timing=True)
    assert strict.exit_code == 3 and len(strict.failures) == 2


def test_missing_point_and_changed_seed_fail(bundle_dir: Path, tmp_path: Path) -> None:
    def reseed(rec: dict[str, Any]) -> None:
        if rec["point_id"] == POINTS[2]:
            rec["seed"] += 1

    verdict = reproduce(bundle_dir, tmp_path / "out", False, copying_rerun(reseed, drop=POINTS[0]))
    assert verdict.exit_code == 3
    assert any(POINTS[0] in f and "missing in the re-run" in f for f in verdict.failures)
    assert any(POINTS[2] in f and " seed:" in f for f in verdict.failures)


@pytest.mark.parametrize("tamper", ["edit_byte", "remove", "add"])
def test_tampered_bundle_is_refused_without_rerun(bundle_dir: Path, tmp_path: Path, tamper: str) -> None:
    if tamper == "edit_byte":
        data = bytearray((bundle_dir / "results.parquet").read_bytes())
        data[100] ^= 0xFF
        (bundle_dir / "results.parquet").write_bytes(bytes(data))
        needle = "modified: results.parquet"
    elif tamper == "remove":
        RunDir.of(bundle_dir).record("level0", POINTS[1]).unlink()
        needle = f"missing: points/level0/{POINTS[1]}.json"
    else:
        (bundle_dir / "points" / "level0" / "extra.json").write_text("{}")
        needle = "added: points/level0/extra.json"
    calls: list[Path] = []
    verdict = reproduce(bundle_dir, tmp_path / "out", False, copying_rerun(calls=calls))
    assert verdict.status == "tampered" and verdict.exit_code == 3
    assert calls == [], "a tampered bundle must never be re-run"
    assert any(p.startswith(needle) for p in verdict.checksum_problems)
    assert json.loads((tmp_path / "out" / "reproduce.json").read_text())["status"] == "tampered"


def test_archive_bundle_is_extracted_and_reproduced(bundle_dir: Path, tmp_path: Path) -> None:
    archive = bundle.archive(bundle_dir, tmp_path / "demo.tar.gz")
    verdict = reproduce(archive, tmp_path / "out", True, copying_rerun())
    assert verdict.reproduced


def test_environment_difference_warns_or_refuses(bundle_dir: Path, tmp_path: Path) -> None:
    other = copy.deepcopy(envinfo.environment_record(light=True))
    other["packages"]["numpy"] = "0.0.1"
    _write_manifest(bundle_dir, other)
    bundle.write_checksums(bundle_dir)  # a bundle published from another environment
    with pytest.raises(D5PipeError, match="packages.numpy"):
        reproduce(bundle_dir, tmp_path / "strict", True, copying_rerun())
    verdict = reproduce(bundle_dir, tmp_path / "lenient", False, copying_rerun())
    assert verdict.reproduced
    assert verdict.env_reference_hash != verdict.env_current_hash
    assert verdict.env_differences[0].startswith("packages.numpy: 0.0.1 ->")


def test_out_dir_must_be_empty(bundle_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.txt").write_text("x")
    with pytest.raises(D5PipeError, match="not empty"):
        reproduce(bundle_dir, tmp_path / "out", False, copying_rerun())


def test_cli_exit_codes(bundle_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    cmd_reproduce.add_arguments(parser)
    parser.set_defaults(rerun=copying_rerun())
    assert cmd_reproduce.main(parser.parse_args([str(bundle_dir), "-o", str(tmp_path / "a")])) == 0
    assert "reproduced" in capsys.readouterr().out
    parser.set_defaults(rerun=copying_rerun(_slower_and_wrong))
    assert cmd_reproduce.main(parser.parse_args([str(bundle_dir), "-o", str(tmp_path / "b")])) == 3
    (bundle_dir / "report.html").write_text("edited")
    assert cmd_reproduce.main(parser.parse_args([str(bundle_dir), "-o", str(tmp_path / "c")])) == 3
    assert "modified: report.html" in capsys.readouterr().err
