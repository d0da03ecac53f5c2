"""The ONE level registry: every layer above the levels reads it, and nothing else names a level.

Each level declares itself in its own package (``levels/levelN/stage.py``, a
d5pipe.levels.stage.Level); this module imports those declarations directly. The planner (which
sections a point hashes, its check, its cost, its user targets), the config schema and
validation (which sections and values exist), the Snakemake rules (one rule per stage), the plan
index schema, the shard jobs (which runner to call), the results (what each level derives, what
its side-by-side tables compare) and the report all take it from here. Adding a level: its
package with a ``stage.py`` and one line in :data:`LEVELS` (docs/architecture.md, "Adding a level").

Reading the registry imports nothing heavy: the declarations are torch-free (a level-0 shard never
imports MPI, ``d5pipe plan`` never imports torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.level0.stage import LEVEL as LEVEL0
from d5pipe.levels.level1.stage import LEVEL as LEVEL1
from d5pipe.levels.level2.stage import LEVEL as LEVEL2
from d5pipe.levels.level3.stage import LEVEL as LEVEL3
from d5pipe.levels.stage import Factor, Level

LEVELS: tuple[Level, ...] = (LEVEL0, LEVEL1, LEVEL2, LEVEL3)
"""Every level, in pipeline order."""

STAGES: dict[str, Level] = {level.name: level for level in LEVELS}
STAGE_NAMES: tuple[str, ...] = tuple(STAGES)
"""All stages in pipeline order."""

SWEEPABLE_SECTIONS: frozenset[str] = frozenset(s for level in LEVELS for s in level.sections)
"""Config sections a sweep axis may name."""

SECTION_SCHEMAS: dict[str, type] = {name: cls for level in LEVELS for name, cls in level.schemas.items()}
"""The config sections the levels own -> their schema dataclasses."""

RECIPE_STAGE: str = next(level.name for level in LEVELS if level.recipes)
"""The stage acceptance recipes judge unless an entry names another."""

NODE_AXIS = "placement.node"
"""The axis that pins points to distinct nodes (d5pipe.execute.placement)."""

RESOURCE_ENTRIES: tuple[str, ...] = ("default", "prepare_data", *STAGE_NAMES)
"""Keys of ``executor.resources``: a default, the data preparation jobs, one per stage."""


def stage(name: str) -> Level:
    """The declaration of ``name`` (a one-line error naming the known stages otherwise)."""
    try:
        return STAGES[name]
    except KeyError:
        raise D5PipeError(f"unknown stage {name!r}; known: {', '.join(STAGE_NAMES)}") from None


def array_job(entry: str, placed: bool) -> bool:
    """Whether the jobs of ``entry`` (``prepare_data`` or a stage) go to SLURM as one job array:
    not a level whose shards' task counts follow their ranks, and not a ``placed`` stage (its
    shards are pinned to different nodes)."""
    return not placed and not (entry in STAGES and STAGES[entry].tasks_from_ranks)


def factors() -> list[tuple[str, Factor]]:
    """``(stage, factor)`` of every level's compared factors."""
    return [(level.name, f) for level in LEVELS for f in level.factors]


def check_config_targets(config: Mapping[str, Any]) -> None:
    """Every user registry of every enabled stage of a whole config (e.g. a bundle's
    ``config.yaml``) against the allow-list of the person running d5pipe; nothing is imported or
    searched for."""
    for name in config.get("stages") or []:
        if name in STAGES:
            STAGES[name].check_targets(config)
