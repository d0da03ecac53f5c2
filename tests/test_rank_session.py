"""Rank sessions: a launch that dies before its first point is retryable, a later death is not."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from d5pipe.levels.level3.launch import LaunchPlan, build_launch
from d5pipe.levels.level3.session import LAUNCH_TMP_PREFIX, LaunchDied, RankSession

# a stand-in for the ranks: answers point 0 (when told to) and then dies
FAKE = """
import json, os, sys, time
from pathlib import Path
root, answer = Path(sys.argv[1]), sys.argv[2] == "1"
spec = root / "point-0.json"
while not spec.exists():
    time.sleep(0.01)
if not answer:
    os._exit(3)
out = Path(json.loads(spec.read_text())["out_dir"])
(out / "rank0.tmp").write_text(json.dumps({"rank": 0}))
os.replace(out / "rank0.tmp", out / "rank0.json")  # whole, as a real rank's write_json: never seen empty
while not (root / "point-1.json").exists():
    time.sleep(0.01)
os._exit(4)
"""


def _session(tmp_path: Path, answer: bool) -> RankSession:
    root = tmp_path / "session"
    plan = LaunchPlan("fake", [sys.executable, "-c", FAKE, str(root), "1" if answer else "0"], {}, 1, False, 1)
    session = RankSession(plan, root, 1)
    session.start()
    return session


def test_ranks_dying_before_the_first_point_are_a_retryable_launch_failure(tmp_path: Path) -> None:
    session = _session(tmp_path, answer=False)
    out = tmp_path / "p0"
    out.mkdir()
    with pytest.raises(LaunchDied, match="fake exited with 3"):
        session.run({"out_dir": str(out)}, out, 60)
    assert not session.alive()


def test_ranks_dying_after_a_point_fail_that_point_only(tmp_path: Path) -> None:
    session = _session(tmp_path, answer=True)
    first, second = tmp_path / "p0", tmp_path / "p1"
    first.mkdir()
    second.mkdir()
    assert session.run({"out_dir": str(first)}, first, 60) == [{"rank": 0}]
    with pytest.raises(RuntimeError, match="fake exited with 4") as info:
        session.run({"out_dir": str(second)}, second, 60)
    assert not isinstance(info.value, LaunchDied)


READY = """
import json, os, sys, time
from pathlib import Path
root = Path(sys.argv[1])
while not (root / "point-0.json").exists():
    time.sleep(0.01)
time.sleep(0.3)  # "importing torch and joining the process group"
(root / "ready.json").write_text("{}")
out = Path(json.loads((root / "point-0.json").read_text())["out_dir"])
(out / "rank0.tmp").write_text(json.dumps({"rank": 0}))
os.replace(out / "rank0.tmp", out / "rank0.json")
while not (root / "stop").exists():
    time.sleep(0.01)
"""


def test_the_wait_for_the_ranks_to_launch_is_timed_apart_from_the_point(tmp_path: Path) -> None:
    import time

    root = tmp_path / "session"
    session = RankSession(LaunchPlan("fake", [sys.executable, "-c", READY, str(root)], {}, 1, False, 1), root, 1)
    out = tmp_path / "p0"
    out.mkdir()
    t0 = time.monotonic()
    session.start()
    assert session.run({"out_dir": str(out)}, out, 60) == [{"rank": 0}]
    whole = time.monotonic() - t0
    session.close()
    assert session.launch_s is not None and 0.3 <= session.launch_s <= whole


LEAVE = """
import os, sys, time
from pathlib import Path
(Path(os.environ["TMPDIR"]) / "left-by-a-rank").write_text("x")
(Path(sys.argv[1]) / "tmp-written").write_text(os.environ["TMPDIR"])
time.sleep(600)
"""


def _wait_for(predicate, what: str, ceiling_s: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + ceiling_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {ceiling_s:g} s: {what}"
        time.sleep(0.05)


def test_a_killed_launch_takes_its_temporary_directory_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch gets a TMPDIR of its own (launchers leave files in the temporary directory), and
    killing the launch removes it with whatever the ranks left there."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process's temporary directory, too
    root = tmp_path / "session"
    session = RankSession(LaunchPlan("fake", [sys.executable, "-c", LEAVE, str(root)], {}, 1, False, 1), root, 1)
    session.start()
    try:
        _wait_for(lambda: (root / "tmp-written").exists(), "the rank wrote into its TMPDIR")
        own = Path((root / "tmp-written").read_text())
        assert own.parent == temp and own.name.startswith(LAUNCH_TMP_PREFIX) and (own / "left-by-a-rank").exists()
    finally:
        session.kill()
    assert not session.alive() and list(temp.iterdir()) == []


@pytest.mark.mpi
def test_a_killed_mpirun_leaves_no_session_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed mpirun leaves its session directory (ompi.<pid>) behind, and a later mpirun given the
    same process id fails to start; here it lies in the launch's own TMPDIR, which goes with it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process's temporary directory, too
    root = tmp_path / "session"
    plan = build_launch(backend="mpi", ranks=1, spec_path=root, worker_args=["--session", str(root)])
    session = RankSession(plan, root, 1)
    session.start()  # the real rank worker, waiting for its first point
    try:
        assert session.tmp is not None
        own = session.tmp
        _wait_for(lambda: any(own.glob("ompi.*")), "mpirun made its session directory in the launch's TMPDIR")
    finally:
        session.kill()
    assert list(temp.iterdir()) == []
    # the rank, killed with its launcher while it may still be importing, does not wait on for points
    _wait_for(lambda: not _processes_naming(str(root)), "the orphaned rank ended")


def _processes_naming(text: str) -> list[int]:
    """This machine's processes whose command line contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
