"""The C++ compiler this process would build with: what torch.utils.cpp_extension runs (``$CXX``,
else ``c++``). A compiled operator's build key names it (d5pipe.levels.level0.compiled), and the
environment record keeps it (d5pipe.provenance.environment), so a re-run on another compiler says so."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

from d5pipe.core.errors import D5PipeError


def compiler() -> tuple[str, str]:
    """(path, first line of ``--version``) of the C++ compiler torch uses (``$CXX``, else ``c++``);
    a one-line error when there is none."""
    return _compiler(os.environ.get("CXX") or "c++", os.environ.get("PATH", ""))


@lru_cache(maxsize=8)
def _compiler(name: str, search: str) -> tuple[str, str]:
    path = shutil.which(name, path=search)
    if path is None:
        raise D5PipeError(f"no C++ compiler: {name!r} is not on PATH (a compiled operator needs one: install g++, "
                          "or set CXX)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    said = (out.stdout or out.stderr).strip()
    return path, said.splitlines()[0] if said else ""


def compiler_info() -> dict[str, str] | None:
    """:func:`compiler` as a record, None when there is none."""
    try:
        path, version = compiler()
    except D5PipeError:
        return None
    return {"path": path, "version": version}
