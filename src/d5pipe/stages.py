"""Registry of stage runners, imported lazily so a level-0 shard never imports MPI or Horovod."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from d5pipe.records import PointContext, PointOutcome

RUNNERS: dict[str, str] = {
    "level0": "d5pipe.level0:run_point",
    "level1": "d5pipe.level1:run_point",
    "level2": "d5pipe.level2:run_point",
    "level3": "d5pipe.distributed:run_point",
}

Runner = Callable[[PointContext], PointOutcome]


def get_runner(stage: str) -> Runner:
    """The ``run_point`` function of ``stage``."""
    module, attr = RUNNERS[stage].split(":")
    fn: Runner = getattr(importlib.import_module(module), attr)
    return fn
