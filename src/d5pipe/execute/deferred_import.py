"""Modules imported on first use, for the one process that may never use them.

Snakemake imports every installed executor plugin when it starts, and the SLURM plugin imports
pandas and numpy at import time for its efficiency report: about half a second on the critical
path of every local run in d5pipe's Snakemake process (d5pipe.execute.snakemake_main), where
only the report job uses them. :func:`defer` puts a stand-in into ``sys.modules``; the first
attribute read on it (or :func:`resolve_all`) imports the real module, under a lock, and the
stand-in then forwards every read to it. Code that imports the module after that gets the real
one from ``sys.modules``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_LOCK = threading.RLock()  # re-entrant: the real import may read the stand-in in this thread


class _Deferred(types.ModuleType):
    """Stands in for a module until something reads an attribute of it."""

    def __getattr__(self, attr: str) -> Any:  # only for what the stand-in itself lacks
        return getattr(_real(self), attr)

    def __dir__(self) -> list[str]:
        return dir(_real(self))


def _real(stand_in: _Deferred) -> types.ModuleType:
    with _LOCK:
        real: types.ModuleType | None = stand_in.__dict__.get("_d5pipe_real")
        if real is None:
            name = stand_in.__name__
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            real = importlib.import_module(name)
            stand_in.__dict__["_d5pipe_real"] = real
        return real


def defer(*names: str) -> list[str]:
    """Stand-ins for the top-level modules ``names`` that are installed and not imported yet;
    returns the names deferred."""
    done = []
    for name in names:
        if "." in name or name in sys.modules or importlib.util.find_spec(name) is None:
            continue
        sys.modules[name] = _Deferred(name)
        done.append(name)
    return done


def resolve_all() -> None:
    """Import the real module behind every stand-in still in ``sys.modules``."""
    for mod in [m for m in list(sys.modules.values()) if isinstance(m, _Deferred)]:
        _real(mod)
