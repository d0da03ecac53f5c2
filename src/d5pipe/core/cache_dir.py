"""Where machine-local things shared by run directories live."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """The user's d5pipe cache: ``$D5PIPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/d5pipe``, else
    ``~/.cache/d5pipe``. Machine-local things shared by run directories live there: prepared
    datasets (d5pipe.rundir.data_cache) and the machine's ceilings (d5pipe.measure.ceilings)."""
    root = os.environ.get("D5PIPE_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "d5pipe")
    return Path(root)
