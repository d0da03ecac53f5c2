"""A bundle's Python environment travels in its lock and is rebuilt on demand (issue 41):
``d5pipe env --check BUNDLE`` and ``d5pipe reproduce BUNDLE --rebuild-env``, for real -- a run
of this project's environment reproduced from a colleague's checkout one commit ahead, whose
environment has another version of one dependency (tabulate, from the machine's package index);
the rebuilt environment runs the bundle's d5pipe commit; a second reproduction from the cache,
and the one-line refusals (a version no index has, another interpreter) that leave nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from d5pipe.provenance.bundle import write_checksums
from tests.conftest import d5pipe

PACKAGE = "tabulate"
ROOT = Path(__file__).resolve().parents[1]


def _locked(run: Path) -> dict[str, Any]:
    manifest = json.loads((run / "manifest.json").read_text())
    return {e["name"]: e for e in manifest["environment"]["lock"]["entries"]}


def _git(*args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def _colleague(path: Path, requirement: str) -> Path:
    """A colleague's checkout of d5pipe one commit ahead of this one, in an environment that is this
    one with ``requirement`` (another version of one dependency) and that checkout installed over it
    -- built without touching this environment or this checkout."""
    checkout = path / "d5pipe"
    _git("clone", "--quiet", str(ROOT), str(checkout))
    _git("-C", str(checkout), "checkout", "--quiet", "--detach", _git("-C", str(ROOT), "rev-parse", "HEAD"))
    (checkout / "NOTES").write_text("a colleague's change\n")
    _git("-C", str(checkout), "add", "NOTES")
    _git("-C", str(checkout), "commit", "--quiet", "-m", "a colleague's change")
    env = path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    own = next((env / "lib").glob("python*/site-packages"))
    dirs = [p for p in sys.path if Path(p).name == "site-packages" and Path(p).is_dir()]
    (own / "_base.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
    pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", "--no-deps",
           "--ignore-installed"]
    subprocess.run([*pip, requirement], check=True, capture_output=True)
    subprocess.run([*pip, "-e", str(checkout)], check=True, capture_output=True)
    return env / "bin" / "python"


def _run(python: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "D5PIPE_ENV_CACHE": str(cache)}
    return subprocess.run([str(python), "-m", "d5pipe.cli.main", *args], capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("bundle") / "run"
    r = d5pipe("run", "quickstart", "stages=[level0]", "repetitions=1", "sweep.grid.operators.size=[64]",
               "--out", str(run))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return run


@pytest.mark.slow
def test_a_bundle_reproduces_in_its_rebuilt_environment_and_the_second_time_from_the_cache(
        bundle: Path, tmp_path: Path) -> None:
    mine = _locked(bundle)[PACKAGE]["version"]
    other = "0.8.10" if mine != "0.8.10" else "0.10.0"
    python = _colleague(tmp_path / "colleague", f"{PACKAGE}=={other}")
    cache = tmp_path / "envs"
    published = json.loads((bundle / "manifest.json").read_text())["environment"]["git"]["commit"]
    assert _locked(bundle)["d5pipe"]["commit"] == published

    check = _run(python, "env", "--check", str(bundle), cache=cache)
    assert check.returncode == 0, check.stderr
    assert f"{PACKAGE}: bundle {mine} (index), here {other} (index)" in check.stdout
    assert f"against the bundle's {published[:12]}" in check.stdout  # the colleague's d5pipe is another commit
    assert "can close the gap" in check.stdout and not cache.exists()  # --check runs nothing

    plain = _run(python, "reproduce", str(bundle), "--out", str(tmp_path / "plain"), cache=cache)
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]  # the metrics still agree
    assert f"packages.{PACKAGE}: {mine} -> {other}" in plain.stderr  # the verdict names the difference
    assert f"{PACKAGE} {mine} -> {other}" in plain.stderr and "--rebuild-env" in plain.stderr

    first = _run(python, "reproduce", str(bundle), "--out", str(tmp_path / "first"), "--rebuild-env", cache=cache)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "environment: built" in first.stderr and f"{PACKAGE}=={mine}" in first.stderr
    assert "reproduced (" in first.stdout
    assert "not rebuilt (recorded facts" in first.stderr and "the interpreter (bundle Python" in first.stderr
    assert "packages." not in first.stderr  # no package differs from the bundle's any more
    rerun = json.loads((tmp_path / "first" / "manifest.json").read_text())["environment"]
    assert rerun["packages"] == json.loads((bundle / "manifest.json").read_text())["environment"]["packages"]
    assert rerun["python"]["executable"].startswith(str(cache))  # measured inside the rebuilt environment
    assert rerun["git"]["commit"] == published  # by the bundle's d5pipe, not the colleague's checkout
    assert f"d5pipe at git {published[:12]}" in first.stderr

    second = _run(python, "reproduce", str(bundle), "--out", str(tmp_path / "second"), "--rebuild-env", cache=cache)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "environment: reused" in second.stderr and "building it took" in second.stderr
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1  # built once


@pytest.mark.slow
@pytest.mark.parametrize(("field", "value", "says"), [
    ("version", "0.0.999", f"{PACKAGE}==0.0.999 (in the bundle's lock) is not on the package index"),
    ("python", "3.99.0", "made with Python 3.99.0"),
])
def test_a_lock_that_cannot_be_rebuilt_is_one_line_and_leaves_nothing(
        bundle: Path, tmp_path: Path, field: str, value: str, says: str) -> None:
    edited = tmp_path / "edited"
    subprocess.run(["cp", "-a", str(bundle), str(edited)], check=True)
    manifest = json.loads((edited / "manifest.json").read_text())
    lock = manifest["environment"]["lock"]
    if field == "python":
        lock["python"] = value
    else:
        next(e for e in lock["entries"] if e["name"] == PACKAGE)["version"] = value
    (edited / "manifest.json").write_text(json.dumps(manifest))
    write_checksums(edited)  # a publisher's lock, not a tampered bundle
    cache = tmp_path / "envs"
    r = _run(Path(sys.executable), "reproduce", str(edited), "--out", str(tmp_path / "out"), "--rebuild-env",
             cache=cache)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert not (tmp_path / "out").exists()
    assert not cache.exists() or not any(p.is_dir() for p in cache.iterdir())  # no environment, not half of one
