"""What two runs differ in (d5pipe.provenance.run_diff), and ``compare`` opening with it."""

from __future__ import annotations

import argparse
import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest

from d5pipe.cli import cmd_compare
from d5pipe.config.code_dir import write_code
from d5pipe.core.code_hash import ModuleCode
from d5pipe.core.yamlio import safe_dump
from d5pipe.provenance import bundle
from d5pipe.provenance.environment import env_hash
from d5pipe.provenance.run_diff import SAME_LINE, run_differences
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.manifest import write_manifest
from tests.test_compare import make_run

RECORD: dict[str, Any] = {
    "schema_version": 1,
    "python": {"implementation": "CPython", "version": "3.12.3"},
    "packages": {"numpy": "2.1.0", "torch": "2.5.1"},
    "torch": {"version": "2.5.1", "num_threads": 2},
    "cpu": {"model": "Test CPU 3000", "logical_cpus": 2, "physical_cores": 2, "flags": ["avx2"]},
    "gpu": None,
    "os": {"system": "Linux", "kernel": "6.1"},
    "hostname": "node1",
    "env": {"OMP_NUM_THREADS": None, "SLURM_JOB_ID": None},
    "git": {"commit": "abc", "diff_sha256": None},
}
CONFIG: dict[str, Any] = {"name": "demo", "seed": 0, "repetitions": 3, "train": {"epochs": 3, "lr": 0.1}}


def describe(run: Path, record: dict[str, Any], config: dict[str, Any], overrides: list[str],
             code: dict[str, bytes] | None = None) -> Path:
    """Give ``run`` what d5pipe's own writers put there: config.yaml and overrides.yaml (as
    write_plan does), a manifest with the environment record and hash, ``code/`` (write_code)."""
    rd = RunDir.of(run)
    run.mkdir(parents=True, exist_ok=True)
    rd.write_file(rd.config_path, safe_dump(config, sort_keys=False).encode())
    rd.write_file(rd.overrides_path, safe_dump({"experiment": "demo", "overrides": overrides}).encode())
    write_manifest(run, {**rd.manifest, "schema_version": 1, "experiment": "demo", "config": config,
                         "environment": record, "env_hash": env_hash(record)})
    src = run.parent / f"{run.name}-src"
    modules = {}
    for name, blob in (code or {}).items():
        rel = name.replace(".", "/") + ".py"
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(blob)
        sha = hashlib.sha256(blob).hexdigest()
        modules[name] = ModuleCode(name, sha, str(src), (rel,), (sha,))
    write_code(run, modules)
    return run


def other_record(**packages: str) -> dict[str, Any]:
    record = copy.deepcopy(RECORD)
    record["packages"].update(packages)
    return record


def test_one_override_and_one_package_are_both_named(tmp_path: Path) -> None:
    a = describe(tmp_path / "a", RECORD, CONFIG, ["train.epochs=3"])
    b = describe(tmp_path / "b", other_record(numpy="2.1.1"), {**CONFIG, "train": {"epochs": 5, "lr": 0.1}},
                 ["train.epochs=5"])
    found = run_differences(a, b)
    assert not found.same()
    assert found.config == ("train.epochs: 3 -> 5", "overrides: train.epochs=3 -> train.epochs=5")
    assert found.environment == (f"env_hash {env_hash(RECORD)} -> {env_hash(other_record(numpy='2.1.1'))}",
                                 "packages.numpy: 2.1.0 -> 2.1.1")
    assert found.code == () and found.machine == () and found.unknown == ()
    text = "\n".join(found.lines())
    assert SAME_LINE not in text and "train.epochs: 3 -> 5" in text and "packages.numpy: 2.1.0 -> 2.1.1" in text


def test_identical_runs_give_the_same_line_and_a_machine_is_still_named(tmp_path: Path) -> None:
    a = describe(tmp_path / "a", RECORD, CONFIG, [], code={"mypkg.ops": b"x = 1\n"})
    b = describe(tmp_path / "b", RECORD, CONFIG, [], code={"mypkg.ops": b"x = 1\n"})
    assert run_differences(a, b).lines() == [SAME_LINE]
    moved = copy.deepcopy(RECORD)
    moved["hostname"], moved["cpu"]["logical_cpus"] = "node2", 64
    c = describe(tmp_path / "c", moved, CONFIG, [], code={"mypkg.ops": b"x = 1\n"})
    found = run_differences(a, c)
    assert found.same() and found.machine == ("cpu.logical_cpus: 2 -> 64", "hostname: node1 -> node2")
    assert found.lines()[0] == SAME_LINE


def test_user_code_and_missing_records_are_named(tmp_path: Path) -> None:
    a = describe(tmp_path / "a", RECORD, CONFIG, [], code={"mypkg.ops": b"x = 1\n"})
    b = describe(tmp_path / "b", RECORD, CONFIG, [], code={"mypkg.ops": b"x = 2\n"})
    (code,) = run_differences(a, b).code
    assert code.startswith("mypkg.ops: ") and code.endswith("(mypkg/ops.py)")
    bare = tmp_path / "bare"
    bare.mkdir()
    found = run_differences(a, bare)
    assert not found.same()
    assert found.unknown == ("config: no config.yaml in B", "environment: not recorded in B")


def test_compare_opens_with_what_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for name, record, epochs in (("a", RECORD, 3), ("b", other_record(numpy="2.1.1"), 5), ("c", RECORD, 3)):
        run = make_run(tmp_path, name, 1.0, (8,), seed=1, reps=2)
        describe(run, record, {**CONFIG, "train": {"epochs": epochs, "lr": 0.1}}, [f"train.epochs={epochs}"])
        bundle.write_checksums(run)
        runs.append(str(run))
    parser = argparse.ArgumentParser()
    cmd_compare.add_arguments(parser)
    cmd_compare.main(parser.parse_args([runs[0], runs[1]]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "what differs between A and B:"
    assert any("train.epochs: 3 -> 5" in ln for ln in lines[1:4])
    assert any("packages.numpy: 2.1.0 -> 2.1.1" in ln for ln in lines[1:6])
    cmd_compare.main(parser.parse_args([runs[0], runs[2]]))
    assert capsys.readouterr().out.splitlines()[0] == SAME_LINE
