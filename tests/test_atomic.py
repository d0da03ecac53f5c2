"""Every temp-file-and-rename write goes through d5pipe.core.atomic, with the mode ``open()``
would give; the user's directories are looked up in d5pipe.core.user_dirs only."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from d5pipe.core.atomic import replacing
from d5pipe.core.user_dirs import user_cache_dir, user_config_dir, user_data_dir

SRC = Path(__file__).resolve().parents[1] / "src" / "d5pipe"


def test_replacing_renames_with_the_umask_mode_and_leaves_nothing_on_error(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    with replacing(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]
    with replacing(tmp_path / "linked", durable=False, created=False) as free:
        assert not free.exists()
        os.link(target, free)
    assert (tmp_path / "linked").read_bytes() == b"new"


def _calls_and_strings(path: Path) -> tuple[set[str], set[str]]:
    """The module's calls of attributes (``os.replace``, ``tempfile.mkstemp``, ``x.home``; a path's
    ``tmp.replace(path)`` or ``tmp.rename(path)`` as ``<path>.replace``: one argument, not a string,
    which pandas' and str's never are) and of names (``.NamedTemporaryFile`` after a from-import),
    and its string constants."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.add(f".{node.func.id}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            calls.add(f"{node.func.value.id if isinstance(node.func.value, ast.Name) else ''}.{attr}")
            if attr in ("replace", "rename") and len(node.args) == 1 and not node.keywords \
                    and not isinstance(node.args[0], ast.Constant):
                calls.add("<path>.replace")
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return calls, strings


def test_no_rename_write_or_user_directory_outside_their_modules() -> None:
    homes = {f"XDG_{d}_HOME" for d in ("CACHE", "DATA", "CONFIG")}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        calls, strings = _calls_and_strings(path)
        if rel != "core/atomic.py":
            temp_files = {c for c in calls if c.split(".")[1] in ("mkstemp", "NamedTemporaryFile")}
            assert not calls & {"os.replace", "os.rename", "<path>.replace"} and not temp_files, \
                f"{rel}: write through d5pipe.core.atomic.replacing"
        if rel != "core/user_dirs.py":
            assert not {c.split(".")[1] for c in calls} & {"home"} and not strings & homes, \
                f"{rel}: look user directories up in d5pipe.core.user_dirs"


def test_user_directories_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from d5pipe.history.store import default_path
    from d5pipe.provenance.rebuild import cache_root

    for var in ("D5PIPE_CACHE_DIR", "D5PIPE_ENV_CACHE", "D5PIPE_HISTORY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "f"))
    assert (user_cache_dir(), user_data_dir(), user_config_dir()) == (
        tmp_path / "c" / "d5pipe", tmp_path / "d" / "d5pipe", tmp_path / "f" / "d5pipe")
    assert default_path() == tmp_path / "d" / "d5pipe" / "history.duckdb"
    monkeypatch.setenv("D5PIPE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine" / "envs"  # rebuilt environments follow the user cache too
