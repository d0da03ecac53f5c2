"""The ONE stage registry: every place that knows about levels reads it.

The planner (which config sections a stage's points hash), the config schema and validation
(which sections and values exist), the Snakemake rules (one rule per stage, generated from this
table in ``workflow/rules/levels.smk``), the plan-index schema (its stage names), the shard jobs
(which ``run_point`` to call) and the report (which section renders a stage) all take it from
here. Adding a level is one entry below plus its package under ``d5pipe.levels``.

Targets are ``"module:attribute"`` strings imported only when used, so reading the registry
imports nothing heavy (a level-0 shard never imports MPI, ``d5pipe plan`` never imports torch).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from d5pipe.core.errors import D5PipeError


@dataclass(frozen=True)
class Stage:
    """One level of the pipeline."""

    name: str
    """Stage name used in configs, plan files, record paths and result rows (``level0``)."""
    title: str
    """Human title (report headings, ``d5pipe plan``)."""
    sections: tuple[str, ...]
    """Config sections a point of this stage reads; its point ID hashes exactly these (``placement``
    only where it differs from its default, so IDs without node placement stay as they were)."""
    point: str
    """``module:function`` of ``run_point(ctx: PointContext) -> PointOutcome``."""
    validate: str
    """``module:function`` of the torch-free check of one resolved point config (``d5pipe plan``)."""
    report: str
    """``module:function`` building the stage's report section from the run's data."""
    needs_data: bool = False
    """Points read a prepared dataset (``data/<key>.npz``, made by ``prepare_data``)."""
    tasks_from_ranks: bool = False
    """A shard's SLURM job gets one task per rank (the most ``distributed.ranks`` in the shard)."""


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("level0", "L0 operators", ("operators", "timer", "placement"),
              point="d5pipe.levels.level0.point:run_point",
              validate="d5pipe.levels.level0.validate:check_point",
              report="d5pipe.results.report.levels:level0"),
        Stage("level1", "L1 network processing", ("model", "dataset", "level1", "timer", "placement"),
              point="d5pipe.levels.level1.point:run_point",
              validate="d5pipe.levels.level1.validate:check_point",
              report="d5pipe.results.report.levels:level1", needs_data=True),
        Stage("level2", "L2 training", ("model", "dataset", "train", "timer", "placement"),
              point="d5pipe.levels.level2.point:run_point",
              validate="d5pipe.levels.level2.validate:check_point",
              report="d5pipe.results.report.levels:level2", needs_data=True),
        Stage("level3", "L3 distributed", ("model", "dataset", "train", "distributed", "timer", "placement"),
              point="d5pipe.levels.level3.point:run_point",
              validate="d5pipe.levels.level3.validate:check_point",
              report="d5pipe.results.report.levels:level3", needs_data=True,
              tasks_from_ranks=True),
    )
}

STAGE_NAMES: tuple[str, ...] = tuple(STAGES)
"""All stages in pipeline order."""

SWEEPABLE_SECTIONS: frozenset[str] = frozenset(s for st in STAGES.values() for s in st.sections)
"""Config sections a sweep axis may name."""

NODE_AXIS = "placement.node"
"""The axis that pins points to distinct nodes (d5pipe.execute.placement)."""

RESOURCE_ENTRIES: tuple[str, ...] = ("default", "prepare_data", *STAGE_NAMES)
"""Keys of ``executor.resources``: a default, the data preparation jobs, one per stage."""


def array_job(entry: str, placed: bool) -> bool:
    """Whether the jobs of ``entry`` (``prepare_data`` or a stage) go to SLURM as one job array:
    not level 3 (its shards' task counts follow their ranks) and not a ``placed`` stage (its
    shards are pinned to different nodes)."""
    return not placed and not (entry in STAGES and STAGES[entry].tasks_from_ranks)


def stage(name: str) -> Stage:
    """The registry entry of ``name`` (a one-line error naming the known stages otherwise)."""
    try:
        return STAGES[name]
    except KeyError:
        raise D5PipeError(f"unknown stage {name!r}; known: {', '.join(STAGE_NAMES)}") from None


def load_target(target: str) -> Any:
    """Import ``module:attribute`` (a registry target; never a user-supplied path)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
