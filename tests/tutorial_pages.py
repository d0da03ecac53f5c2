"""The commands of a tutorial page (docs/tutorials/*.md), run as a user runs them: every fenced block
opened with exactly three backquotes and ``sh``, in page order, as one bash script (``set -euo
pipefail``) in a fresh directory that stands for the clone (``.venv`` and ``scripts`` link to the
ones under test). Output blocks (``text``) and blocks of other pages are never run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
FENCE = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)


def commands(page: Path) -> list[str]:
    """The page's ``sh`` blocks, in order."""
    return [m.group(1) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def clone_like(work: Path) -> Path:
    """A directory that looks like the clone to a tutorial's commands: ``.venv`` is the environment
    running the tests, ``scripts`` the project's. ``sudo`` is a pass-through where the tests run as
    root on a machine without it (a user types it; root needs nothing)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "scripts").symlink_to(ROOT / "scripts")
    if shutil.which("sudo") is None and os.geteuid() == 0:
        shims = work / ".shims"
        shims.mkdir()
        (shims / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
        (shims / "sudo").chmod(0o755)
    return work


def run_page(page: Path, work: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run every ``sh`` block of ``page`` in ``work`` (made by :func:`clone_like`); the finished process."""
    script = "set -euo pipefail\n" + "\n".join(commands(page))
    (work / "tutorial.sh").write_text(script, encoding="utf-8")
    env = dict(os.environ)
    if (work / ".shims").is_dir():
        env["PATH"] = f"{work / '.shims'}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(work / "tutorial.sh")], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def run_page_ok(page: Path, work: Path, timeout_s: float) -> str:
    """:func:`run_page`, asserting that every command succeeded; its stdout and stderr."""
    proc = run_page(page, work, timeout_s)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{page.name} failed (rc {proc.returncode}):\n{out[-8000:]}"
    return out
