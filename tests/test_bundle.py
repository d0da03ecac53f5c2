"""Checksums, tamper detection, archives and safe extraction, on real files and real tar archives."""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from d5pipe import D5PipeError
from d5pipe.cli import cmd_bundle
from d5pipe.provenance import bundle


def _run_dir(root: Path) -> Path:
    run = root / "run1"
    (run / "points" / "level0").mkdir(parents=True)
    (run / "plan" / "level0").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\nname: demo\n")
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "experiment": "demo"}))
    pd.DataFrame({"point_id": ["p1", "p2"], "metric": ["t", "t"], "value": [1.0, 2.0]}).to_parquet(
        run / "results.parquet")
    (run / "points" / "level0" / "p1.json").write_text(json.dumps({"point_id": "p1", "status": "ok"}))
    (run / "plan" / "level0" / "shard-00000.json").write_text("{}")
    (run / "plan" / "index.json").write_text(json.dumps({"schema_version": 1, "experiment": "demo"}))
    (run / "report.html").write_text("<html></html>")
    for excluded in (".snakemake/log/x.log", "logs/level0/s.log", "work/level0/p1/steps.jsonl"):
        (run / excluded).parent.mkdir(parents=True, exist_ok=True)
        (run / excluded).write_text("machine-local\n")
    (run / "points" / "level0" / ".p3.json.abc.tmp").write_text("half written")
    return run


def test_checksums_cover_bundle_files_only(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    path = bundle.write_checksums(run)
    listed = bundle.read_checksums(run)
    assert set(listed) == {"config.yaml", "manifest.json", "results.parquet", "points/level0/p1.json",
                           "plan/level0/shard-00000.json", "plan/index.json", "report.html"}
    assert path.read_text().startswith("# d5pipe checksums schema_version 1\n")
    assert bundle.verify(run) == []


def test_one_edited_byte_of_results_is_detected(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    bundle.write_checksums(run)
    data = bytearray((run / "results.parquet").read_bytes())
    data[len(data) // 2] ^= 0x01
    (run / "results.parquet").write_bytes(bytes(data))
    problems = bundle.verify(run)
    assert len(problems) == 1 and problems[0].startswith("modified: results.parquet")


def test_missing_and_added_files_are_detected(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    bundle.write_checksums(run)
    (run / "points" / "level0" / "p1.json").unlink()
    (run / "points" / "level0" / "p9.json").write_text("{}")
    (run / "logs" / "more.log").write_text("ignored")
    assert bundle.verify(run) == [
        "missing: points/level0/p1.json",
        "added: points/level0/p9.json (not listed in CHECKSUMS.sha256)",
    ]


def test_missing_checksum_file_is_a_problem(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    problems = bundle.verify(run)
    assert len(problems) == 1 and "CHECKSUMS.sha256" in problems[0]


def test_archive_extract_roundtrip_is_deterministic(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    first = bundle.archive(run, tmp_path / "a.tar.gz")
    second = bundle.archive(run, tmp_path / "b.tar.gz")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        names = tar.getnames()
    assert "run1/CHECKSUMS.sha256" in names and not any("logs" in n or ".snakemake" in n for n in names)
    root = bundle.extract(first, tmp_path / "out")
    assert root == tmp_path / "out" / "run1"
    assert bundle.verify(root) == []
    with pytest.raises(D5PipeError, match="not empty"):
        bundle.extract(first, tmp_path / "out")


def test_archive_refuses_a_tampered_run(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    bundle.write_checksums(run)
    (run / "config.yaml").write_text("seed: 1\n")
    with pytest.raises(D5PipeError, match="modified: config.yaml"):
        bundle.archive(run, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def _tar_with(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("run1/config.yaml")
        ok.size = 5
        tar.addfile(ok, io.BytesIO(b"a: 1\n"))
        member.size = len(data) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("member", "needle"),
    [
        (tarfile.TarInfo("../evil"), "../evil"),
        (tarfile.TarInfo("run1/../../evil"), "run1/../../evil"),
        (tarfile.TarInfo("/tmp/d5pipe-evil-abs"), "/tmp/d5pipe-evil-abs"),
        (_link("run1/link", "../../outside", tarfile.SYMTYPE), "run1/link"),
        (_link("run1/abs", "/etc/passwd", tarfile.SYMTYPE), "run1/abs"),
        (_link("run1/hard", "../etc/passwd", tarfile.LNKTYPE), "run1/hard"),
    ],
)
def test_extract_refuses_members_escaping_dest(tmp_path: Path, member: tarfile.TarInfo, needle: str) -> None:
    archive = _tar_with(tmp_path / "evil.tar.gz", member, b"pwned\n")
    dest = tmp_path / "dest" / "inner"
    with pytest.raises(D5PipeError) as err:
        bundle.extract(archive, dest)
    assert needle in str(err.value)
    assert not (tmp_path / "dest" / "evil").exists() and not (tmp_path / "evil").exists()
    assert not dest.exists(), "nothing is extracted when any member is refused"


def test_extract_allows_a_link_inside(tmp_path: Path) -> None:
    archive = _tar_with(tmp_path / "ok.tar.gz", _link("run1/alias.yaml", "config.yaml", tarfile.SYMTYPE))
    root = bundle.extract(archive, tmp_path / "dest")
    assert (root / "alias.yaml").read_text() == "a: 1\n"


def test_cli_seal_archive_verify_extract(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    parser = argparse.ArgumentParser()
    cmd_bundle.add_arguments(parser)
    assert cmd_bundle.main(parser.parse_args([str(run)])) == 0
    assert bundle.verify(run) == []
    assert cmd_bundle.main(parser.parse_args([str(run), "--archive", str(tmp_path / "r.tar.gz")])) == 0
    assert (tmp_path / "r.tar.gz").is_file()
    assert cmd_bundle.main(parser.parse_args([str(run), "--verify"])) == 0
    assert cmd_bundle.main(parser.parse_args([str(tmp_path / "r.tar.gz"), "--extract", str(tmp_path / "x")])) == 0
    assert bundle.verify(tmp_path / "x" / "run1") == []
    (run / "report.html").write_text("<html>edited</html>")
    assert cmd_bundle.main(parser.parse_args([str(run), "--verify"])) == 3
    with pytest.raises(D5PipeError, match="modified: report.html"):
        cmd_bundle.main(parser.parse_args([str(run)]))
    assert cmd_bundle.main(parser.parse_args([str(run), "--rehash"])) == 0
    assert bundle.verify(run) == []


def test_a_bundle_holds_only_records_whose_code_it_carries(tmp_path: Path) -> None:
    """A record that is not a point of the current plan (an earlier config's or code version's) stays
    out of the bundle, and d5pipe bundle says so."""
    from tests.conftest import TEST_CONF, d5pipe

    run = tmp_path / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run), "sweep.grid.operators.size=[16]")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [kept] = (run / "points" / "level0").glob("*.json")
    orphan = run / "points" / "level0" / "matmul-old-code-version.json"
    orphan.write_text(kept.read_text())
    assert bundle.left_out_records(run) == ["points/level0/matmul-old-code-version.json"]
    assert bundle.verify(run)[0].startswith("added: points/level0/matmul-old-code-version.json")  # after the seal
    sealed = d5pipe("bundle", str(run), "--rehash")
    assert sealed.returncode == 0, sealed.stderr
    assert "1 point record(s) left out of the bundle" in sealed.stdout
    listed = bundle.read_checksums(run)
    assert f"points/level0/{kept.name}" in listed and "points/level0/matmul-old-code-version.json" not in listed
    assert bundle.verify(run) == []  # the left-out record is not a problem of the bundle
    archive = d5pipe("bundle", str(run), "--archive", str(tmp_path / "r.tar.gz"))
    assert archive.returncode == 0, archive.stderr
    out = tmp_path / "x"
    assert d5pipe("bundle", str(tmp_path / "r.tar.gz"), "--extract", str(out)).returncode == 0
    extracted = out / "run"
    assert not (extracted / "points" / "level0" / orphan.name).exists() and bundle.verify(extracted) == []
    (extracted / "points" / "level0" / orphan.name).write_text(orphan.read_text())  # put back: not sealed there
    assert bundle.verify(extracted) == []  # named in the seal as left out, unchanged
    orphan.write_text(orphan.read_text().replace('"ok"', '"failed"'))
    assert [p.split(" (")[0] for p in bundle.verify(run)] == ["added: points/level0/matmul-old-code-version.json"]
