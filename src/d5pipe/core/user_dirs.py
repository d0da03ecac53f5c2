"""The user's d5pipe directories, looked up here only (through platformdirs: ``$XDG_CACHE_HOME``,
``$XDG_DATA_HOME`` and ``$XDG_CONFIG_HOME`` on Linux, the platform's own places elsewhere).

* cache (:func:`user_cache_dir`): machine-local things shared by run directories -- prepared
  datasets (d5pipe.rundir.data_cache), the machine's ceilings (d5pipe.measure.ceilings), rebuilt
  environments (d5pipe.provenance.rebuild);
* data (:func:`user_data_dir`): the history store (d5pipe.history.store);
* config (:func:`user_config_dir`): the allow-list file (d5pipe.core.allowlist).
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "d5pipe"


def user_cache_dir() -> Path:
    """``$D5PIPE_CACHE_DIR``, else the platform's user cache (``$XDG_CACHE_HOME/d5pipe``, else
    ``~/.cache/d5pipe`` on Linux)."""
    root = os.environ.get("D5PIPE_CACHE_DIR")
    if root:
        return Path(root)
    import platformdirs  # imported on use: ``import d5pipe`` stays light

    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def user_data_dir() -> Path:
    """The platform's user data directory (``$XDG_DATA_HOME/d5pipe``, else ``~/.local/share/d5pipe`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def user_config_dir() -> Path:
    """The platform's user config directory (``$XDG_CONFIG_HOME/d5pipe``, else ``~/.config/d5pipe`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir(APP, appauthor=False))
