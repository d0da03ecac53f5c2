"""Issue 55: compiled user operators -- C++ sources built by the pipeline, checked and timed like any
operator (d5pipe.levels.level0.compiled).

Real builds with torch.utils.cpp_extension and the system's compiler, real ``d5pipe run``s. A full
build costs 15 s or more of compiling, so the module builds the example's source once (its cache
shared, under ``make test``, with the SLURM lane through ``$D5PIPE_TEST_COMPILED_CACHE``), once more
after an edit, and once more where a bundle is reproduced with an empty cache.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from d5pipe.provenance.bundle import bundle_files
from tests.conftest import TEST_CONF, d5pipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "compiled_matmul"
BROKEN = "this is not C++;\n#include <torch/extension.h>\n"
"""A source whose first line fails (with -fmax-errors=1 the compiler stops there)."""
WRONG = """
torch::Tensor wrong_matmul(torch::Tensor a, torch::Tensor b) { return blocked_matmul(a, b) * 1.01; }
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = os.environ.get("D5PIPE_TEST_COMPILED_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("compiled-cache")


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example's package (the edit test changes it) and a package that does not compile."""
    root = tmp_path_factory.mktemp("packages")
    shutil.copytree(EXAMPLE / "cpp_matmul", root / "cpp_matmul", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "broken_ops").mkdir()
    (root / "broken_ops" / "__init__.py").write_text("")
    (root / "broken_ops" / "broken.cpp").write_text(BROKEN)
    return root


def _env(path: Path, cache: Path, **more: str) -> dict[str, str | None]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])),
            "D5PIPE_CACHE_DIR": str(cache), "D5PIPE_HISTORY": "off", **more}


def _run(path: Path, cache: Path, out: Path, *overrides: str, experiment: str = "compiled_toy",
         conf: Path = TEST_CONF) -> Any:
    return d5pipe("run", experiment, "--config-dir", str(conf), "--allow", "cpp_matmul", "--allow", "broken_ops",
                  "--out", str(out), *overrides, env=_env(path, cache), timeout=1100)


def _records(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "points" / "level0").glob("*.json")}


def _builds(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "builds").glob("*.json"))]


def _metric(rec: dict[str, Any], name: str) -> Any:
    return next((m["value"] for m in rec["metrics"] if m["name"] == name), None)


@pytest.fixture(scope="module")
def first(packages: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("first") / "run"
    r = _run(packages, cache, out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_one_build_for_a_sweep_of_many_shards_checked_and_side_by_side(first: Path) -> None:
    builds = _builds(first)
    assert len(builds) == 1 and builds[0]["status"] == "ok", builds  # one build_operator job for 8 shards
    assert len(list((first / "logs" / "build_operator").glob("*.log"))) == 1
    assert len(list((first / "shards" / "level0").glob("*.json"))) == 12
    build = builds[0]
    assert build["compiler"]["version"] and build["flags"] == ["-O3"] and set(build["sources"]) == {"matmul.cpp"}
    records = _records(first)
    compiled = {pid: r for pid, r in records.items() if not pid.startswith("matmul")}
    assert len(compiled) == 8
    for rec in compiled.values():  # every point of it records the build that made its binary
        assert rec["status"] == "ok", rec["error"]
        made = rec["extra"]["compiled"]
        assert (made["key"], made["binary_sha256"]) == (build["key"], build["binary_sha256"])
        assert _metric(rec, "correctness") == "pass" and _metric(rec, "compare_to") == "matmul"
    blocked = [r for pid, r in compiled.items() if pid.startswith("cpp_blocked")]
    assert all(_metric(r, "grad_check") == "pass" for r in blocked)  # its hand-written backward
    naive = [r for pid, r in compiled.items() if pid.startswith("cpp_naive")]
    assert all(_metric(r, "grad_check") is None and any("backward unsupported" in w for w in r["extra"]["warnings"])
               for r in naive)
    report = (first / "report.md").read_text()
    assert "User operators side by side (baseline operators.op=matmul)" in report
    assert "cpp_blocked vs matmul" in report and "cpp_naive vs matmul" in report
    assert {"code/cpp_matmul/matmul.cpp", "builds/" + build["key"] + ".json"} <= set(bundle_files(first))


def test_a_second_run_reuses_the_binary(first: Path, packages: Path, cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    r = _run(packages, cache, out, "sweep.grid.operators.size=[16]", "repetitions=1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (again,) = _builds(out)
    assert again["outcome"] == "reused" and again["binary_sha256"] == _builds(first)[0]["binary_sha256"]


def test_editing_the_source_replans_rebuilds_and_a_wrong_kernel_fails_its_check(
        first: Path, packages: Path, cache: Path, tmp_path: Path) -> None:
    source = packages / "cpp_matmul" / "matmul.cpp"
    before = source.read_text()
    out = tmp_path / "edited"
    sweep = ("sweep.grid.operators.op=[cpp_blocked,cpp_wrong]", "sweep.grid.operators.size=[16]", "repetitions=1")
    try:
        source.write_text(before.replace("PYBIND11_MODULE", WRONG + "\nPYBIND11_MODULE", 1).replace(
            '  m.def("naive_matmul"', '  m.def("wrong_matmul", &wrong_matmul);\n  m.def("naive_matmul"', 1))
        r = _run(packages, cache, out, *sweep)
    finally:
        source.write_text(before)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]  # the wrong kernel fails its forward check
    (rebuilt,) = _builds(out)
    assert rebuilt["outcome"] == "built" and rebuilt["key"] != _builds(first)[0]["key"]
    records = _records(out)
    wrong = next(r for pid, r in records.items() if pid.startswith("cpp_wrong"))
    blocked = next(r for pid, r in records.items() if pid.startswith("cpp_blocked"))
    assert _metric(wrong, "correctness") == "fail" and _metric(blocked, "correctness") == "pass"
    assert blocked["point_id"] not in _records(first)  # the edited source is another point


def test_a_compile_error_fails_only_the_points_that_need_it(packages: Path, cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "broken"
    r = _run(packages, cache, out, "sweep.grid.operators.op=[matmul,cpp_broken]", "sweep.grid.operators.size=[16]",
             "repetitions=1")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    (failed,) = _builds(out)
    assert failed["status"] == "failed" and "broken.cpp" in failed["error"] and "error" in failed["error"]
    records = _records(out)
    broken = next(r for pid, r in records.items() if pid.startswith("cpp_broken"))
    assert broken["status"] == "failed" and "the build of broken_ops (broken.cpp) failed" in broken["error"]
    assert "broken.cpp:1" in broken["error"]  # the compiler's own first error line
    assert all(r["status"] == "ok" for pid, r in records.items() if pid.startswith("matmul"))
    status = d5pipe("status", str(out), env=_env(packages, cache))
    assert "broken.cpp:1" in status.stdout


@pytest.mark.parametrize("override, env, says", [
    ((), {"CXX": "/nonexistent/c++"}, "no C++ compiler: '/nonexistent/c++' is not on PATH"),
    (("operators.custom.cpp_naive.sources=[../matmul.cpp]",), {}, "must be a path inside the package's directory"),
    (("operators.custom.cpp_naive.sources=[missing.cpp]",), {}, "is not a file"),
    (("operators.custom.cpp_naive.sources=[__init__.py]",), {}, "is not a C, C++ or CUDA source"),
])
def test_a_bad_value_or_a_missing_compiler_is_one_line_at_plan(packages: Path, cache: Path, override: tuple[str, ...],
                                                               env: dict[str, str], says: str) -> None:
    r = d5pipe("plan", "compiled_toy", "--config-dir", str(TEST_CONF), "--allow", "cpp_matmul", "--allow", "broken_ops",
               *override,
               env=_env(packages, cache, **env))
    assert r.returncode == 2 and says in r.stderr and "operators.custom.cpp_naive" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_package_must_be_allowed_by_the_runner(packages: Path, cache: Path) -> None:
    r = d5pipe("plan", "compiled_toy", "--config-dir", str(TEST_CONF), env=_env(packages, cache))
    assert r.returncode == 2 and "'cpp_matmul' is outside the allow-list" in r.stderr, r.stderr


def test_the_examples_bundle_reproduces_rebuilding_from_its_sources(first: Path, cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "example"
    r = _run(EXAMPLE, cache, out, "sweep.grid.operators.size=[32]", "repetitions=2", "operators.peak=false",
             experiment="compiled_matmul", conf=EXAMPLE / "conf")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    archive = tmp_path / "example.tar.gz"
    assert d5pipe("bundle", str(out), "--archive", str(archive)).returncode == 0
    again = tmp_path / "again"
    # neither the example on the path nor a cached binary: the bundle's code/ is all there is
    fresh = tmp_path / "empty-cache"
    r = d5pipe("reproduce", str(archive), "--out", str(again), "--allow", "cpp_matmul",
               env={"PYTHONPATH": os.environ.get("PYTHONPATH"), "D5PIPE_CACHE_DIR": str(fresh), "D5PIPE_HISTORY": "off"},
               timeout=1100)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (rebuilt,) = _builds(again)
    assert rebuilt["outcome"] == "built" and rebuilt["status"] == "ok"
    assert rebuilt["sources"] == _builds(out)[0]["sources"]  # the same source, from the bundle
    planned = json.loads((again / "plan" / "index.json").read_text())["builds"][rebuilt["planned_key"]]
    assert Path(planned["root"]).is_relative_to(again) or "code" in Path(planned["root"]).parts
    assert not Path(planned["root"]).is_relative_to(EXAMPLE)
    df = pd.read_parquet(again / "results.parquet")
    assert set(df[df.metric == "correctness"].text) == {"pass"}
