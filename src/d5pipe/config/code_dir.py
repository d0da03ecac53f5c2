"""The user code a run used, carried in the run directory: ``RUN/code/``. Torch-free.

When a run is planned (``d5pipe run``), the source files of every user module a point uses
(d5pipe.core.code_hash: the module, its parents' ``__init__.py`` and the allowed modules it
imports) are copied to ``RUN/code/<path relative to its import-path directory>``
(``RUN/code/mypkg/models.py``), and ``RUN/code/index.json`` records, per module, the hash that
went into the points' IDs and the hash of each file. The directory is part of the bundle
(d5pipe.provenance.bundle seals everything in the run directory), so whoever reproduces the run
has the code: ``d5pipe reproduce`` puts the bundle's ``code/`` first on the import path once
the allow-list admits the modules.

Before the index is rewritten, :func:`stale_reasons` compares it with the new plan: a module
whose hash changed makes its points stale ("4 points stale: source of mypkg.models changed
(mypkg/models.py)"); ``d5pipe plan --out RUN`` and ``d5pipe run`` print that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import read_json, write_if_changed
from d5pipe.core.code_hash import ModuleCode

CODE_DIR = "code"
INDEX = "index.json"
SCHEMA_VERSION = 1


def code_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CODE_DIR


def read_index(run_dir: Path) -> dict[str, Any]:
    """``RUN/code/index.json`` (empty when there is none or it does not parse)."""
    data = read_json(code_dir(run_dir) / INDEX)
    return data if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION else {}


def write_code(run_dir: Path, modules: Mapping[str, ModuleCode]) -> list[str]:
    """Copy the modules' source files into ``RUN/code/`` and write its index; files of modules no
    longer used are removed. Returns the copied paths (relative to ``RUN/code``)."""
    root = code_dir(run_dir)
    wanted: dict[str, Path] = {}
    for mc in modules.values():
        for rel in mc.files:
            wanted.setdefault(rel, Path(mc.root) / rel)
    if not modules and not root.exists():
        return []
    for rel, src in sorted(wanted.items()):
        write_if_changed(root / rel, src.read_bytes())
    for path in sorted(root.rglob("*"), reverse=True):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != INDEX and rel not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    index = {"schema_version": SCHEMA_VERSION, "modules": {m: mc.to_json() for m, mc in sorted(modules.items())}}
    write_if_changed(root / INDEX, (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
    return sorted(wanted)


def stale_reasons(previous: Mapping[str, Any], modules: Mapping[str, ModuleCode],
                  points: Mapping[str, Sequence[tuple[str, bool]]]) -> list[str]:
    """One line per changed module: how many not-yet-done points it makes stale, and which files.

    ``previous`` is an earlier :func:`read_index`; ``points`` maps each module to its points as
    ``(point_id, done)`` in the new plan.
    """
    old = previous.get("modules") or {}
    lines = []
    for name, mc in sorted(modules.items()):
        before = old.get(name)
        if not isinstance(before, dict) or before.get("sha256") == mc.sha256:
            continue
        old_files = before.get("files") or {}
        new_files = dict(zip(mc.files, mc.file_sha256))
        changed = sorted(f for f in set(old_files) | set(new_files) if old_files.get(f) != new_files.get(f))
        dists = sorted(set(mc.distributions) ^ set(before.get("distributions") or []))
        what = ", ".join(changed + dists) or "its hash"
        mine = points.get(name, ())
        todo = sum(1 for _pid, done in mine if not done)
        if todo:
            lines.append(f"{todo} point{'s' if todo != 1 else ''} stale: source of {name} changed ({what})")
        elif mine:  # changed back to a version whose points all have records
            lines.append(f"source of {name} changed since the last run ({what}); the {len(mine)} "
                         f"point{'s' if len(mine) != 1 else ''} of this version already have records")
    return lines
