"""Environment record, env_hash and diff: real processes, real git, real mpi4py."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.provenance import bundle
from d5pipe.provenance import environment as envinfo
from d5pipe.provenance import probes as envprobe

_CHILD = (
    "import json, sys; from d5pipe.provenance import environment as envinfo; rec = envinfo.environment_record()\n"
    "mpi_imported = 'mpi4py.MPI' in sys.modules\n"
    "from mpi4py import MPI\n"
    "print(json.dumps({'record': rec, 'mpi_imported_by_envinfo': mpi_imported,\n"
    "                  'mpi_initialised_on_import': MPI.Is_initialized()}))\n"
)


@pytest.fixture(scope="module")
def children() -> dict[str, dict[str, object]]:
    """Three real child processes, started together: two alike, one with another OMP_NUM_THREADS."""
    here = os.environ.get("OMP_NUM_THREADS", "2")
    other = "1" if here != "1" else "2"
    settings = {"a": here, "b": here, "omp": other}
    procs = {
        name: subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS=value))
        for name, value in settings.items()
    }
    results: dict[str, dict[str, object]] = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"child {name} failed"
        results[name] = json.loads(out)
    results["omp"]["value"] = other
    return results


def test_record_has_the_documented_sections() -> None:
    rec = envinfo.environment_record()
    for key in ("python", "packages", "torch", "mpi", "cpu", "os", "hostname", "env", "git"):
        assert key in rec
    assert rec["packages"]["torch"].startswith("2.13.0")
    assert rec["torch"]["num_threads"] >= 1
    assert rec["cpu"]["flags"], "CPU flags from /proc/cpuinfo"
    assert "MPI" in rec["mpi"]["library"] and "\x00" not in rec["mpi"]["library"]
    assert set(envinfo.HASHED_ENV_VARS) <= set(rec["env"])
    json.dumps(rec)  # serialisable


def test_cached_record_is_a_fresh_copy() -> None:
    a = envinfo.environment_record()
    a["packages"]["torch"] = "0.0"
    assert envinfo.environment_record()["packages"]["torch"] != "0.0"


@pytest.mark.slow
def test_same_environment_same_hash_in_two_processes(children: dict[str, dict[str, object]]) -> None:
    first, second = children["a"]["record"], children["b"]["record"]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert envinfo.env_hash(first) == envinfo.env_hash(second)
    assert len(envinfo.env_hash(first)) == envinfo.HASH_LENGTH
    assert envinfo.diff_records(first, second) == []


@pytest.mark.slow
def test_diff_names_changed_omp_num_threads(children: dict[str, dict[str, object]]) -> None:
    base, changed = children["a"]["record"], children["omp"]["record"]
    assert isinstance(base, dict) and isinstance(changed, dict)
    lines = envinfo.diff_records(base, changed)
    omp = [ln for ln in lines if ln.startswith("env.OMP_NUM_THREADS")]
    assert omp and omp[0].endswith("[hash]") and str(children["omp"]["value"]) in omp[0]
    assert envinfo.env_hash(base) != envinfo.env_hash(changed)


@pytest.mark.slow
def test_record_does_not_initialise_mpi(children: dict[str, dict[str, object]]) -> None:
    """envinfo reads the MPI version without importing mpi4py.MPI here; a later import still inits."""
    child = children["a"]
    assert child["mpi_imported_by_envinfo"] is False
    assert child["mpi_initialised_on_import"] is True
    rec = child["record"]
    assert isinstance(rec, dict) and "MPI" in rec["mpi"]["library"]


def test_package_list_matches_the_full_metadata_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata as md

    site = tmp_path / "site"
    for folder, header in (("Weird_Pkg-1.0.dist-info", "Metadata-Version: 2.1\nName: Weird.Pkg\nVersion: 1.0"),
                           ("old-0.1.egg-info", "Metadata-Version: 1.0\nName: old\nVersion: 0.1rc1"),
                           ("nohead-1.dist-info", "Metadata-Version: 2.1\n")):
        (site / folder).mkdir(parents=True)
        name = "PKG-INFO" if folder.endswith("egg-info") else "METADATA"
        body = "\n\nName: not-this\nVersion: 9\nlong description\n"
        (site / folder / name).write_text(header + body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    expected: dict[str, str] = {}
    for dist in md.distributions():
        if dist.metadata["Name"]:
            expected.setdefault(dist.metadata["Name"].lower().replace("_", "-").replace(".", "-"), dist.version)
    got = envprobe.packages()
    assert got == dict(sorted(expected.items()))
    assert got["weird-pkg"] == "1.0" and got["old"] == "0.1rc1" and "nohead" not in got and "torch" in got


def test_changed_package_version_changes_hash_and_is_explained() -> None:
    rec = envinfo.environment_record()
    changed = copy.deepcopy(rec)
    changed["packages"]["numpy"] = "0.0.1"
    assert envinfo.env_hash(rec) != envinfo.env_hash(changed)
    lines = envinfo.diff_records(rec, changed)
    assert len(lines) == 1 and lines[0].startswith("packages.numpy:") and "0.0.1" in lines[0]


def test_another_compiler_changes_the_hash_and_is_named() -> None:
    """Compiled operators (issue 55) and torch.compile build with it: a re-run on another says so."""
    rec = envinfo.environment_record()
    assert rec["compiler"]["path"] and rec["compiler"]["version"]  # make install-test puts g++ here
    changed = copy.deepcopy(rec)
    changed["compiler"]["version"] = "c++ (Other) 99.1"
    assert envinfo.env_hash(rec) != envinfo.env_hash(changed)
    lines = envinfo.diff_records(rec, changed)
    assert len(lines) == 1 and lines[0].startswith("compiler.version:") and "99.1" in lines[0]


def test_hostname_job_id_and_timestamps_do_not_change_hash() -> None:
    rec = envinfo.environment_record()
    other = copy.deepcopy(rec)
    other["hostname"] = "node042"
    other["env"]["SLURM_JOB_ID"] = "123456"
    other["recorded_at"] = "2030-01-01T00:00:00"
    assert envinfo.env_hash(rec) == envinfo.env_hash(other)
    lines = envinfo.diff_records(rec, other)
    assert any(ln.startswith("hostname:") and "node042" in ln for ln in lines)
    assert not any(ln.endswith("[hash]") for ln in lines)


def test_hash_relevant_differences_come_first() -> None:
    rec = envinfo.environment_record()
    other = copy.deepcopy(rec)
    other["hostname"] = "aaa-first-alphabetically"
    other["cpu"]["flags"] = [*rec["cpu"]["flags"], "zz_new_flag"]
    lines = envinfo.diff_records(rec, other)
    assert lines[0].startswith("cpu.flags:") and "+zz_new_flag" in lines[0]
    assert lines[-1].startswith("hostname:")


def test_git_commit_and_diff_hash(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git not installed")
    assert envprobe.git_info(tmp_path) is None  # not a repository
    cmd = [git, "-C", str(tmp_path), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*cmd, "add", "a.py"], check=True)
    subprocess.run([*cmd, "commit", "-q", "-m", "init"], check=True)
    clean = envprobe.git_info(tmp_path)
    assert clean is not None and len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    dirty = envprobe.git_info(tmp_path)
    assert dirty is not None and dirty["dirty"] is True and len(dirty["diff_sha256"]) == 64
    (tmp_path / "a.py").write_text("x = 3\n")
    dirty2 = envprobe.git_info(tmp_path)
    assert dirty2 is not None and dirty2["diff_sha256"] != dirty["diff_sha256"]
    rec = envinfo.environment_record()
    assert envinfo.env_hash({**rec, "git": dirty}) != envinfo.env_hash({**rec, "git": dirty2})


def test_load_record_from_manifest_run_dir_and_archive(tmp_path: Path) -> None:
    rec = envinfo.environment_record()
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "environment": rec,
                                                   "env_hash": envinfo.env_hash(rec)}))
    assert envinfo.load_record(run / "manifest.json") == rec
    assert envinfo.load_record(run) == rec
    archive = bundle.archive(run, tmp_path / "run.tar.gz")
    assert envinfo.load_record(archive) == rec
    (tmp_path / "plain.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(D5PipeError, match="plain.json"):
        envinfo.load_record(tmp_path / "plain.json")
    with pytest.raises(D5PipeError, match="nowhere"):
        envinfo.load_record(tmp_path / "nowhere")


def test_cli_env_hash_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from d5pipe.cli import cmd_env

    parser = argparse.ArgumentParser()
    cmd_env.add_arguments(parser)
    assert cmd_env.main(parser.parse_args(["--hash"])) == 0
    assert capsys.readouterr().out.strip() == envinfo.env_hash()
    rec = envinfo.environment_record()
    rec["env"]["OMP_NUM_THREADS"] = "7"
    (tmp_path / "m.json").write_text(json.dumps({"environment": rec}))
    assert cmd_env.main(parser.parse_args(["--diff", str(tmp_path / "m.json")])) == 0
    out = capsys.readouterr().out
    assert "different" in out and "env.OMP_NUM_THREADS" in out


def test_env_lock_pins_every_distribution_and_names_where_it_came_from(cli) -> None:
    import importlib.metadata

    from packaging.requirements import Requirement

    from d5pipe.provenance.lock import Locked

    r = cli("env", "--lock")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# d5pipe environment lock (schema 1): CPython 3.11")
    pins = {}
    for line in lines:
        if line.startswith(("#", "-e ")):
            continue
        req = Requirement(line.split("  #", 1)[0])
        if req.url is None:
            (spec,) = req.specifier
            assert spec.operator == "=="
            pins[req.name] = spec.version
    assert pins["torch"] == importlib.metadata.version("torch")  # the CPU build's local version included
    assert pins["numpy"] == importlib.metadata.version("numpy")
    root = envprobe.source_root()
    editable = [line for line in lines if line.startswith("-e ")]
    assert any(line.split()[1] == str(root) for line in editable)  # d5pipe itself, from this checkout
    commit = (envprobe.git_info() or {}).get("commit")
    if commit:
        assert any(commit in line for line in editable)
    assert Locked("x", "1", "vcs", "git+https://h/x", "abc").line() == "x @ git+https://h/x@abc"
    assert Locked("y", "2", "url", "https://h/y.whl", sha256="0" * 64).line().endswith("--hash=sha256:" + "0" * 64)
    assert "an index must provide it" in Locked("z", "3", "local", "file:///tmp/z").line()


def test_static_parts_cache_key_ignores_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard job's cwd (the run directory, first on its sys.path) changes as the run writes; the key of
    the cached static parts must not, while an import directory that changes still moves it."""
    run_dir, site = tmp_path / "run", tmp_path / "site"
    run_dir.mkdir()
    site.mkdir()
    monkeypatch.chdir(run_dir)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(run_dir))
    key = envinfo._static_cache_path(run_dir / "env" / "cache", light=False)
    (run_dir / "points").mkdir()
    os.utime(run_dir, ns=(os.stat(run_dir).st_atime_ns, os.stat(run_dir).st_mtime_ns + 10**9))
    assert envinfo._static_cache_path(run_dir / "env" / "cache", light=False) == key
    os.utime(site, ns=(os.stat(site).st_atime_ns, os.stat(site).st_mtime_ns + 10**9))  # a package installed
    assert envinfo._static_cache_path(run_dir / "env" / "cache", light=False) != key
