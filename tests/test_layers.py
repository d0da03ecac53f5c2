"""Every arrow points down: the import graph of ``src/d5pipe``, derived from the code itself
(imports inside functions included), against the one layer order that docs/architecture.md, the
package docstring and this test state."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import d5pipe

SRC = Path(d5pipe.__file__).resolve().parent
DOC = SRC.parents[1] / "docs" / "architecture.md"
ORDER = ("core", "measure", "levels", "config", "plan", "rundir", "results", "provenance", "execute", "history", "cli")
"""Bottom first: a layer imports only the layers before it (and itself)."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every d5pipe module ``module`` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("d5pipe") and name != module:
                yield name


def graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: set(_imported(m, p, known)) for m, p in known.items()}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(face)"


def test_every_import_points_down_the_layer_order() -> None:
    upward = sorted(f"{a} -> {b}" for a, bs in graph().items() for b in bs
                    if layer(a) != "(face)" and (layer(b) == "(face)" or ORDER.index(layer(b)) > ORDER.index(layer(a))))
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_module_imports_itself_back_through_others() -> None:
    edges = graph()
    cycles = []
    for start in edges:  # depth-first search for a path back to start
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "module cycles:\n" + "\n".join(sorted(set(cycles))[:10])


def test_a_cycle_or_an_upward_edge_would_be_found(tmp_path: Path) -> None:
    """The derivation sees an import inside a function, and a relative one."""
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from d5pipe.cli import main\n    from .. import plan\n")
    known = {"d5pipe.cli.main": Path(), "d5pipe.plan": Path(), "d5pipe.core.m": mod}
    assert set(_imported("d5pipe.core.m", mod, known)) == {"d5pipe.cli.main", "d5pipe.plan"}


def test_the_docs_and_the_package_docstring_state_the_same_order() -> None:
    line = next(ln for ln in DOC.read_text(encoding="utf-8").splitlines() if ln.startswith("Layer order"))
    assert tuple(re.findall(r"`(\w+)`", line)) == ORDER
    docstring = d5pipe.__doc__ or ""
    listed = re.findall(r"^``(\w+)``", docstring, flags=re.M)
    assert tuple(listed) == ORDER
