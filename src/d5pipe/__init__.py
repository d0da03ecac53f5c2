"""d5pipe: fair, verifiable, reproducible deep-learning benchmarks on clusters (after Deep500).

The package face. Importing ``d5pipe`` is cheap (no torch, pandas or Hydra); the layers below are
imported when used:

=================  ==========================================================================
``config``         what to run: the stage registry, schemas, Hydra composition, validation
``plan``           pure and torch-free: sweep expansion, point IDs, seeds, shards, recipes
``rundir``         where it is written: the run directory, point records, manifest, atomic writes
``execute``        how it runs: driving Snakemake, shard jobs, resources, SLURM glue, status
``measure``        level-independent measurement: timer, statistics, memory, device, determinism
``levels``         the point contract, models, datasets and ``level0`` .. ``level3``
``results``        aggregation into results.parquet, verdicts, run comparison, the report
``provenance``     environment record and hash, bundles, reproduce
``cli``            one module per ``d5pipe`` subcommand
=================  ==========================================================================

Public API, grouped by level (each name is imported on first use)::

    d5pipe.compose_config, d5pipe.build_plan, d5pipe.run          # config -> plan -> run
    d5pipe.measure_fn (the shared timer), d5pipe.summarize        # measurement
    d5pipe.OperatorSpec                                           # L0 user operators
    d5pipe.PointContext, d5pipe.PointOutcome, d5pipe.Metric       # the level contract
    d5pipe.load_results                                           # results.parquet as pandas
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def user_cache_dir() -> Path:
    """The user's d5pipe cache: ``$D5PIPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/d5pipe``, else
    ``~/.cache/d5pipe``. Machine-local things shared by run directories live there: prepared
    datasets (d5pipe.rundir.data_cache) and the machine's ceilings (d5pipe.measure.ceilings)."""
    root = os.environ.get("D5PIPE_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "d5pipe")
    return Path(root)


class D5PipeError(Exception):
    """A user error: bad config, bad input, missing file.

    The CLI prints ``str(err)`` as one line (no traceback) and exits with ``exit_code`` (2).
    Messages name the key, file or value to fix.
    """

    exit_code = 2

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class WorkflowFailed(D5PipeError):
    """The workflow engine itself failed (points' own failures never cause this)."""

    exit_code = 1


_LAZY: dict[str, str] = {
    # config -> plan -> run
    "compose_config": "d5pipe.config.compose:compose_config",
    "build_plan": "d5pipe.plan.build:build_plan",
    "run": "d5pipe.execute.run:run",
    "RunDir": "d5pipe.rundir.layout:RunDir",
    # measurement (every level)
    "measure_fn": "d5pipe.measure.timer:measure",
    "summarize": "d5pipe.measure.stats:summarize",
    # the level contract
    "PointContext": "d5pipe.levels.contract:PointContext",
    "PointSkipped": "d5pipe.levels.contract:PointSkipped",
    "PointOutcome": "d5pipe.rundir.record:PointOutcome",
    "Metric": "d5pipe.rundir.record:Metric",
    # L0
    "OperatorSpec": "d5pipe.levels.level0.spec:OperatorSpec",
    # results
    "load_results": "d5pipe.results.columns:load_results",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'd5pipe' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


__all__ = ["D5PipeError", "WorkflowFailed", "__version__", *_LAZY]
