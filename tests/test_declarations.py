"""One declaration per built-in (d5pipe.levels.declare): every slot's built-ins are declared by the
package that implements them, their factories exist there, and no module path of a level is
spelled outside that level's package (docstrings, which only point a reader somewhere, and the
package face's lazy exports of public names aside)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import d5pipe
from d5pipe.levels.level1.runtimes import RUNTIMES
from d5pipe.levels.level2.frameworks import FRAMEWORKS
from d5pipe.levels.targets import SLOTS

SRC = Path(d5pipe.__file__).resolve().parent
LEVEL_PATH = re.compile(r"d5pipe\.levels\.(level\d+)\.")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            out |= {id(s.value) for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}
    return out


def test_no_module_path_of_a_level_is_spelled_outside_its_package() -> None:
    spelled = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "__init__.py":
            continue
        parts = path.relative_to(SRC).parts
        own = parts[1] if parts[0] == "levels" and len(parts) > 2 else None
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                spelled += [f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}"
                            for level in LEVEL_PATH.findall(node.value) if level != own]
    assert not spelled, "a level's module path outside its package:\n" + "\n".join(spelled)


@pytest.mark.parametrize("slot_name", sorted(SLOTS))
def test_every_builtin_factory_exists_where_it_is_declared(slot_name: str) -> None:
    for name, declared in SLOTS[slot_name].declared.items():
        assert declared.name == name
        module, _, attr = declared.factory.rpartition(".")
        while not hasattr(importlib.import_module(module), attr.split(".")[0]):  # a class's method
            module, _, head = module.rpartition(".")
            attr = f"{head}.{attr}"
        assert callable(getattr(importlib.import_module(module), attr.split(".")[0])), declared


def test_runtimes_and_frameworks_are_declared_in_the_module_that_implements_them() -> None:
    for declared in (*RUNTIMES.values(), *FRAMEWORKS.values()):
        module = importlib.import_module(declared.factory.rpartition(".")[0])
        assert declared in vars(module).values(), f"{declared.name} is not declared in {module.__name__}"
