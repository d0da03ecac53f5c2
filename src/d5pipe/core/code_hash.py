"""What a user target's code is, without importing it: its source files and their hash. Torch-free.

A point's identity includes the code of the user modules its targets name (d5pipe.plan.build),
so editing a module re-runs exactly the points that use it. For a target ``mypkg.models.MyNet``:

* the **module** is the longest prefix that is a module on the import path (``mypkg.models``),
  found with ``importlib.machinery.PathFinder`` on ``sys.path`` -- a directory search that
  imports nothing (``importlib.util.find_spec`` would import the parent packages);
* its **files** are the module, the ``__init__.py`` of every parent package (they run on import)
  and, transitively, every module of an *allowed* package it imports (``import``/``from ... import``
  statements read from the source with :mod:`ast`, relative imports included; imports built at
  run time are not seen). Modules outside the allow-list (the standard library, torch) are not
  followed: they are part of the environment record, not of the point;
* a package's native sources (C, C++ and CUDA files and headers, :data:`NATIVE_SUFFIXES`) anywhere
  under its directory are its files too: a compiled operator's sources (d5pipe.levels.level0.compiled)
  are part of the point, and travel in ``RUN/code/``;
* a module installed in ``site-packages``/``dist-packages`` (not an editable checkout) stands for
  its distribution: ``name==version`` is hashed instead of its files, and nothing is copied;
* the **hash** is sha256 over the sorted ``(relative path, sha256 of bytes)`` of the files and the
  distribution strings, so the same sources give the same hash on any machine and in any
  directory (the run directory's ``code/`` copy gives the hash of the original).

Only modules under the allow-list are ever resolved (the caller checks first).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

from d5pipe.core.allowlist import ALWAYS_ALLOWED, module_allowed
from d5pipe.core.errors import D5PipeError

INSTALLED_DIRS = ("site-packages", "dist-packages")
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx")
"""Files of a package that a compiler reads (module docstring)."""


@dataclass(frozen=True)
class ModuleCode:
    """The code one user module stands for."""

    module: str
    sha256: str
    root: str
    """The import-path directory the files were found under (absolute)."""
    files: tuple[str, ...] = ()
    """Source files relative to ``root`` (``mypkg/__init__.py``, ``mypkg/models.py``), sorted."""
    file_sha256: tuple[str, ...] = ()
    """sha256 of each file, in the order of :attr:`files`."""
    distributions: tuple[str, ...] = ()
    """``name==version`` of installed allowed packages it stands for or imports."""

    def to_json(self) -> dict[str, object]:
        return {"sha256": self.sha256, "files": dict(zip(self.files, self.file_sha256)),
                "distributions": list(self.distributions)}


@dataclass
class _Found:
    name: str
    spec: ModuleSpec
    root: Path


def _find(name: str, search: Sequence[str] | None) -> ModuleSpec | None:
    try:
        return PathFinder.find_spec(name, list(search) if search is not None else None)
    except (ImportError, ValueError):
        return None


def _root_of(spec: ModuleSpec) -> Path | None:
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        origin = Path(spec.origin)
        return origin.parent.parent if spec.submodule_search_locations is not None else origin.parent
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]).parent if locations else None


def locate_module(dotted: str) -> list[_Found]:
    """The chain of modules ``dotted`` passes through (``mypkg``, ``mypkg.models``), found on
    ``sys.path`` without importing anything; empty when its top-level package is not there."""
    parts = dotted.split(".")
    top = _find(parts[0], None)
    if top is None:
        return []
    root = _root_of(top)
    if root is None:
        return []
    chain = [_Found(parts[0], top, root)]
    for i in range(1, len(parts)):
        parent = chain[-1].spec
        if parent.submodule_search_locations is None:
            break
        sub = _find(".".join(parts[: i + 1]), list(parent.submodule_search_locations))
        if sub is None:
            break
        chain.append(_Found(".".join(parts[: i + 1]), sub, root))
    return chain


def _installed(root: Path) -> bool:
    return any(part in INSTALLED_DIRS for part in root.parts)


def _distribution(top: str) -> str | None:
    from importlib import metadata

    names = metadata.packages_distributions().get(top) or []
    for name in names:
        try:
            return f"{name}=={metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


@lru_cache(maxsize=4096)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (cached per path, modification time and size)."""
    st = path.stat()
    return _file_digest(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=4096)
def _imports(path: str, mtime_ns: int, package: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (SyntaxError, ValueError):
        return ()
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                if not base:
                    continue
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            if mod:
                out.append(mod)
                out += [f"{mod}.{alias.name}" for alias in node.names if alias.name != "*"]
    return tuple(out)


def _source_files(chain: list[_Found]) -> list[tuple[str, Path]]:
    """``(module name, file)`` of each module in ``chain`` that has a source file."""
    return [(f.name, Path(f.spec.origin)) for f in chain
            if f.spec.origin and f.spec.origin.endswith(".py") and Path(f.spec.origin).is_file()]


def module_code(target: str, prefixes: Sequence[str]) -> ModuleCode | None:
    """The code of the module ``target`` lives in (None for d5pipe's own targets).

    ``target`` must be allowed by ``prefixes`` (checked by the caller); a module that is not on
    the import path is a one-line error naming it.
    """
    if module_allowed(target, ALWAYS_ALLOWED):
        return None
    chain = locate_module(target)
    if not chain:
        raise D5PipeError(f"target {target!r}: module {target.split('.', 1)[0]!r} is not on the import "
                          "path (PYTHONPATH) of this process")
    module = chain[-1].name
    root = chain[0].root
    if _installed(root):
        dist = _distribution(chain[0].name)
        if dist is not None:
            return _finish(module, root, {}, {dist})
    files: dict[str, Path] = {}
    dists: set[str] = set()
    _collect(chain, prefixes, files, dists, set())
    return _finish(module, root, files, dists)


def _collect(chain: list[_Found], prefixes: Sequence[str], files: dict[str, Path], dists: set[str],
             seen: set[str]) -> None:
    for name, path in _source_files(chain):
        if name in seen:
            continue
        seen.add(name)
        rel = path.relative_to(chain[0].root).as_posix()
        files[rel] = path
        if path.name == "__init__.py":
            files.update(native_sources(path.parent, chain[0].root))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imported in _imports(str(path), path.stat().st_mtime_ns, package):
            if imported in seen or not module_allowed(imported, prefixes) or module_allowed(imported, ALWAYS_ALLOWED):
                continue
            sub = locate_module(imported)
            if not sub:
                continue  # (for "from pkg.mod import Name", Name is no module: pkg.mod is followed)
            if _installed(sub[0].root):
                dist = _distribution(sub[0].name)
                if dist is not None:
                    dists.add(dist)
                    seen.add(imported)
                    continue
            if sub[0].root != chain[0].root:
                continue  # another import-path directory: its module gets its own entry
            _collect(sub, prefixes, files, dists, seen)


def native_sources(directory: Path, root: Path) -> dict[str, Path]:
    """A package directory's native sources (:data:`NATIVE_SUFFIXES`), relative to ``root``; hidden
    and ``__pycache__`` directories left out."""
    out: dict[str, Path] = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).parts
        if path.suffix in NATIVE_SUFFIXES and path.is_file() and not any(
                p.startswith(".") or p == "__pycache__" for p in rel[:-1]):
            out[path.relative_to(root).as_posix()] = path
    return out


def _finish(module: str, root: Path, files: dict[str, Path], dists: Iterable[str]) -> ModuleCode:
    names = sorted(files)
    digests = [file_digest(files[n]) for n in names]
    distributions = tuple(sorted(dists))
    h = hashlib.sha256()
    for name, d in zip(names, digests):
        h.update(f"{name}\0{d}\n".encode())
    for dist in distributions:
        h.update(f"dist\0{dist}\n".encode())
    return ModuleCode(module, h.hexdigest(), str(root.resolve()), tuple(names), tuple(digests), distributions)


@dataclass
class CodeCache:
    """Per-planning cache: each distinct target resolved once."""

    prefixes: tuple[str, ...]
    modules: dict[str, ModuleCode] = field(default_factory=dict)
    """Module name -> its code, for every user module some point named."""
    _by_target: dict[str, ModuleCode | None] = field(default_factory=dict)

    def of(self, target: str) -> ModuleCode | None:
        if target not in self._by_target:
            code = module_code(target, self.prefixes)
            self._by_target[target] = code
            if code is not None:
                self.modules[code.module] = code
        return self._by_target[target]
