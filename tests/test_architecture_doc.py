"""docs/architecture.md stays true and readable: every module of ``src/d5pipe`` is named under its
folder in "Modules by folder", every module, folder or name in a module it points to exists, and
no table cell is longer than a paragraph."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "d5pipe"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYERS = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
CELL_CHARS = 400
"""A paragraph: the longest table cell allowed."""


def _named_modules() -> set[str]:
    """``folder/module.py`` for every ``module.py`` in a bullet under a ``### `folder/``` heading."""
    section = DOC.split("## Modules by folder", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    folder = None
    for line in section.splitlines():
        heading = re.fullmatch(r"### `([a-z0-9_/]+)/`", line.strip())
        if heading:
            folder = heading.group(1)
        elif folder and line.lstrip().startswith("- "):
            named |= {f"{folder}/{name}" for name in re.findall(r"`([a-z0-9_]+\.py)`", line)}
    return named


def test_every_module_is_named_under_its_folder_and_every_named_one_exists() -> None:
    modules = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if p.name != "__init__.py"}
    named = _named_modules()
    assert not modules - named, f"modules docs/architecture.md does not name: {sorted(modules - named)}"
    assert not named - modules, f"modules docs/architecture.md names that do not exist: {sorted(named - modules)}"


DATA_SUFFIXES = {"json", "yaml", "parquet", "html", "md", "txt", "log", "sha256", "duckdb", "npz", "npy", "pt"}
"""``plan/index.json`` is a file of a run directory, not a name in a module."""


def _defines(module: Path, name: str) -> bool:
    """Whether ``name`` is a word of the module (defined, imported or exported lazily there)."""
    return re.search(rf"\b{name}\b", module.read_text(encoding="utf-8")) is not None


def _resolve(parts: list[str]) -> tuple[Path, list[str]] | None:
    """The longest prefix of ``parts`` (under ``src/d5pipe``) that is a module or package, and the rest."""
    for i in range(len(parts), -1, -1):
        base = SRC.joinpath(*parts[:i])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, parts[i:]
    return None


def test_every_path_and_name_the_doc_points_to_exists() -> None:
    wrong = []
    for token in sorted(set(re.findall(r"`([^`\s]+)`", DOC))):
        path = re.fullmatch(r"([a-z0-9_]+(?:/[a-z0-9_]+)*)(?:\.py|/|\.([A-Za-z_]\w*))?", token)
        dotted = re.fullmatch(r"d5pipe((?:\.[A-Za-z_]\w*)+)", token)
        if path and path.group(1).split("/")[0] in LAYERS and "/" in token:
            found = _resolve(path.group(1).split("/"))
            module = SRC.joinpath(path.group(1))
            if token.endswith(".py"):
                ok = module.with_suffix(".py").is_file()
            elif token.endswith("/"):
                ok = module.is_dir()
            elif path.group(2) in DATA_SUFFIXES:
                continue
            elif path.group(2):
                home = _resolve(path.group(1).split("/"))
                ok = home is not None and not home[1] and _defines(home[0], path.group(2))
            else:
                ok = found is not None
            if not ok:
                wrong.append(token)
        elif dotted:
            found = _resolve(dotted.group(1).strip(".").split("."))
            if found is None or len(found[1]) > 2 or (found[1] and not _defines(found[0], found[1][0])):
                wrong.append(token)
        elif re.fullmatch(r"tests/[\w/]+\.py", token) and not (ROOT / token).is_file():
            wrong.append(token)
    assert not wrong, f"docs/architecture.md points to what does not exist: {wrong}"


def test_no_table_cell_is_longer_than_a_paragraph() -> None:
    long = [(n, len(cell)) for n, line in enumerate(DOC.splitlines(), 1) if line.startswith("|")
            for cell in line.strip("|").split(" | ") if len(cell) > CELL_CHARS]
    assert not long, f"table cells longer than {CELL_CHARS} characters (line, length): {long}"
