"""The reference pages under docs/reference/ are what the code generates now (``make docs``): a key
added to the schema or an option added to a parser without regenerating fails here. Which keys and
commands must appear is derived from the schema and the parsers, never listed by hand."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from d5pipe.cli import main as cli_main
from d5pipe.cli import reference
from d5pipe.config.schema import D5Config

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "reference"


def _keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of a schema dataclass, into nested schemas, lists (``[]``) and maps (``<name>``)."""
    keys: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, path = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            keys += _keys(tp, path + ".")
            continue
        keys.append(path)
        args = typing.get_args(tp)
        if typing.get_origin(tp) is list and args and dataclasses.is_dataclass(args[0]):
            keys += _keys(args[0], path + "[].")
        if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            keys += _keys(args[1], path + ".<name>.")
    return keys


def test_committed_pages_equal_the_generated_ones() -> None:
    assert reference.stale(ROOT) == [], "docs/reference/ is stale: run `make docs` and commit it"


def test_every_schema_key_is_in_the_config_reference() -> None:
    page = (PAGES / "config.md").read_text(encoding="utf-8")
    keys = _keys(D5Config)
    assert len(keys) > 100  # the walk found the level-owned sections too
    missing = [k for k in keys if f"| `{k}` |" not in page]
    assert not missing, f"config keys missing from docs/reference/config.md: {missing}"


@pytest.mark.parametrize("command", list(cli_main.SUBCOMMANDS))
def test_cli_reference_is_what_help_prints(command: str, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(reference.HELP_WIDTH + 2))  # argparse wraps at COLUMNS - 2
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main([command, "--help"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out.rstrip()
    page = (PAGES / "cli.md").read_text(encoding="utf-8")
    assert f"## `d5pipe {command}`\n\n```text\n{printed}\n```" in page


def test_cli_reference_has_the_top_level_help_and_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["--help"]) == 0
    page = (PAGES / "cli.md").read_text(encoding="utf-8")
    assert capsys.readouterr().out.rstrip() in page
    for code, _, _ in reference.exit_codes():
        assert f"\n| {code} |" in page


def test_the_docs_site_builds_without_warnings(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (what ``make docs`` runs): a broken link, a missing page or anchor fails."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()
