"""d5pipe: fair, verifiable, reproducible deep-learning benchmarks on clusters (after Deep500).

The package face. Importing ``d5pipe`` is cheap (no torch, pandas or Hydra); the layers below are
imported when used. Bottom first: a layer imports only the layers above it in this table (the test
tests/test_layers.py derives the graph from the imports and holds it to this order):

=================  ==========================================================================
``core``           what every layer shares: the user-error type, canonical hashing, seeds,
                   atomic writes, config fields and their checks, the stage registry, the
                   metric and outcome types, the admission of user code
``measure``        level-independent measurement: timer, statistics, ceilings, memory, determinism
``levels``         the point contract, models, datasets and ``level0`` .. ``level3``
``config``         what to run: schemas, Hydra composition, validation, recipes
``plan``           pure and torch-free: sweep expansion, point IDs, shards, plan cache
``rundir``         where it is written: the run directory, point records, manifest
``results``        aggregation into results.parquet, verdicts, run comparison, the report
``provenance``     environment record and hash, bundles, reproduce
``execute``        how it runs: driving Snakemake, shard jobs, resources, SLURM glue, status
``history``        every finished run in a DuckDB store; series, steps found and explained, trend page
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
from typing import Any

from d5pipe.core.errors import D5PipeError, WorkflowFailed
from d5pipe.core.user_dirs import user_cache_dir
from d5pipe.core.version import __version__

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
    "PointOutcome": "d5pipe.core.outcome:PointOutcome",
    "Metric": "d5pipe.core.outcome:Metric",
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


__all__ = ["D5PipeError", "WorkflowFailed", "__version__", "user_cache_dir", *_LAZY]
