"""What a level says about itself: the contract every ``levels/levelN/stage.py`` fills in. Torch-free.

A level is one unit. Its package declares, in one :class:`Level` value, everything the layers
above need to know: its config sections and their schemas, the check of one point, its plug-in
slots, its cost model, its comparison factors and quality metrics, what it derives from its
records, what its metric names mean, what it needs installed, and its point runner.
d5pipe.levels.registry collects the declarations; nothing outside a level's own package spells its
name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from d5pipe.core.outcome import Declared, PointOutcome
    from d5pipe.levels.contract import PointContext

PointConfig = Mapping[str, Any]
"""One point's resolved config: the level's sections as plain data (d5pipe.plan.point_config)."""


@dataclass(frozen=True)
class Factor:
    """A compared factor of a level: its axis, its baseline and the timings compared (the
    side-by-side tables of d5pipe.results.comparisons)."""

    column: str
    baseline: str | None
    """The declared baseline value; None: the first value of the sweep, else :attr:`fallback`."""
    metrics: tuple[str, ...]
    title: str
    fallback: str = ""
    quality: str = ""
    """The metric that says what the speed bought (shown for both sides); empty: none."""
    baseline_metric: str = ""
    """Where each variant names its own baseline: the text of this metric on the variant's points
    (level 0: a user operator's ``compare_to``, the built-in it re-implements); empty: one baseline
    for all, :attr:`baseline`. A variant that names none is not compared."""


def point_runner(module: str) -> Callable[[], Callable[[PointContext], PointOutcome]]:
    """A level's :attr:`Level.runner`: ``run_point`` of ``module``, imported only when asked (torch)."""
    return lambda: importlib.import_module(module).run_point


def _none(cfg: PointConfig) -> list[tuple[str, str]]:
    return []


@dataclass(frozen=True)
class Level:
    """One level of the pipeline, as its package declares it."""

    name: str
    """Stage name used in configs, plan files, record paths and result rows."""
    title: str
    """Human title (report headings, ``d5pipe plan``)."""
    sections: tuple[str, ...]
    """Config sections a point of this level reads; its point ID hashes exactly these (``placement``
    only where it differs from its default)."""
    schemas: Mapping[str, type]
    """The config sections this level owns -> their schema dataclasses (shared sections such as
    ``model`` or ``timer`` are owned by d5pipe.levels.schema and d5pipe.measure)."""
    check_point: Callable[[PointConfig], None]
    """The torch-free check of one resolved point config, run by ``d5pipe plan`` for every point."""
    cost: Callable[[PointConfig], float]
    """Expected seconds of work of one point (d5pipe.plan.build sizes shards with it)."""
    runner: Callable[[], Callable[[PointContext], PointOutcome]]
    """The function that measures one point in a shard job, imported when asked (torch)."""
    check_reads: tuple[str, ...] | None = None
    """The keys (or whole sections) :attr:`check_point`, :attr:`used_targets` and
    :attr:`identity_files` read: the planner runs them once per distinct combination of those
    keys' swept values (d5pipe.plan.stage_points). None: they may read anything (every point)."""
    cost_reads: tuple[str, ...] | None = None
    """The keys (or whole sections) :attr:`cost` reads: the planner computes it once per distinct
    combination of those keys' swept values. None: it may read anything (every configuration)."""
    used_targets: Callable[[PointConfig], list[tuple[str, str]]] = _none
    """``(key, dotted path)`` of the user targets a point uses: its code hash covers them."""
    check_targets: Callable[[Mapping[str, Any]], None] = lambda config: None
    """The level's plug-in registries and selectors of a whole config against the runner's
    allow-list, nothing imported (a bundle's config, before ``reproduce`` or ``ab`` runs it)."""
    factors: tuple[Factor, ...] = ()
    """What its side-by-side tables compare."""
    derive: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    """New result rows from the level's rows of one run (level 3: speedup and efficiency against
    the 1-rank point), computed once by d5pipe.results.run_results."""
    parallel_axis: str = ""
    """The axis that counts parallel workers (a speedup above it is implausible)."""
    requires: Callable[[PointConfig], list[tuple[str, str]]] = _none
    """``(setting, Python package)`` a point needs installed (``d5pipe plan`` names what is missing)."""
    profiled_passes: int = 1
    """Profiled passes one point runs when ``profile.enabled`` (d5pipe.measure.profile; level 1: its
    inference and its forward+backward; level 3: one per rank, the ranks at once): ``d5pipe plan``
    prices them with d5pipe.levels.cost_model.PROFILE_PASS_S."""
    identity_files: Callable[[PointConfig], dict[str, str]] = lambda cfg: {}
    """``{"file:<path>": sha256}`` of files whose content is part of a point's identity."""
    builds: Callable[[PointConfig], dict[str, dict[str, Any]]] = lambda cfg: {}
    """What a point needs built before its shard runs, torch-free: build key -> what the
    ``build_operator`` job builds (level 0: a compiled operator, d5pipe.levels.level0.compiled);
    read with :attr:`check_point` (once per combination of :attr:`check_reads`)."""
    needs_data: bool = False
    """Points read a prepared dataset (``data/<key>.npz``, made by ``prepare_data``)."""
    tasks_from_ranks: bool = False
    """A shard's SLURM job gets one task per rank (the most ranks in the shard): no job arrays."""
    recipes: bool = False
    """Acceptance recipes (``recipe.acceptance``) judge this level's points by default."""
    metrics: Mapping[str, Declared] = field(default_factory=dict)
    """Every metric name a point of the level reports, and what it derives (d5pipe.core.outcome.Declared;
    a name may be a pattern, ``<N>`` a rank): docs/reference/metrics.md and the report read it."""
    repetitions: int = 3
    """Processes per point when the config leaves ``repetitions`` null (its default): how many a
    comparison of two runs of this level needs on a shared machine, chosen by measurement
    (README, "Reproducing and comparing runs"), against what a repetition costs."""

    @property
    def has_requirements(self) -> bool:
        """Whether some point may need a package (:attr:`requires` is not the level's no-op)."""
        return self.requires is not _none
