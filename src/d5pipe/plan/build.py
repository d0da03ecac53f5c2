"""From a composed config to a plan: per stage, the points (ID, params, seed) packed into shards.

Nothing here builds an OmegaConf object per point: the config is resolved once into plain data and
each point is the stage's sections of that data with the axis values applied.

**User code is part of what a point means.** Each stage's validate module names the user targets
a point uses (``used_targets(cfg)``, d5pipe.levels.targets); the source hash of each one's module
(d5pipe.core.code_hash, no import) joins the hashed config as ``code: {module: sha256}``, so
editing a module changes exactly the IDs of the points that use it. A point without user code
hashes as before (``{stage, config}``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from d5pipe.config.schema import RootConf, ShardsConf
from d5pipe.core.canonical import digest, normalise
from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.core.seeds import check_unique, point_seed
from d5pipe.levels.registry import NODE_AXIS, STAGES
from d5pipe.levels.stage import Level
from d5pipe.plan.cost import fixed_bounds, pack_by_cost
from d5pipe.plan.point_config import REPEAT_AXIS, stage_base
from d5pipe.plan.stage_points import StagePoints
from d5pipe.plan.sweep import expand, project

PLAN_SCHEMA_VERSION = 1


@dataclass
class StagePlan:
    stage: str
    axes: tuple[str, ...]
    point_ids: list[str]
    params: list[tuple[Any, ...]]
    seeds: list[int]
    bounds: list[int]
    """Shard boundaries: shard ``i`` holds points ``bounds[i]`` to ``bounds[i + 1] - 1``."""
    datasets: list[str] = field(default_factory=list)
    """Per point, the dataset key it needs ("" for stages without data)."""
    modules: list[tuple[str, ...]] = field(default_factory=list)
    """Per point, the user modules whose code its ID includes (empty for built-ins only)."""
    costs: list[float] = field(default_factory=list)
    """Per point, its expected seconds of work (its level's ``cost``, d5pipe.levels.stage.Level)."""

    @property
    def n_shards(self) -> int:
        return len(self.bounds) - 1

    @property
    def points_per_shard(self) -> int:
        """The most points in one shard."""
        return max((b - a for a, b in zip(self.bounds, self.bounds[1:])), default=0)

    def shard_names(self) -> list[str]:
        return [shard_name(i) for i in range(self.n_shards)]

    def shard_slice(self, index: int) -> range:
        return range(self.bounds[index], self.bounds[index + 1])

    def shard_cost_s(self, index: int) -> float:
        return float(sum(self.costs[i] for i in self.shard_slice(index))) if self.costs else 0.0

    def params_dict(self, i: int) -> dict[str, Any]:
        return dict(zip(self.axes, self.params[i]))


@dataclass
class Plan:
    experiment: str
    root_seed: int
    config: dict[str, Any]
    config_hash: str
    axes: tuple[str, ...]
    stages: dict[str, StagePlan]
    datasets: dict[str, dict[str, Any]]
    """Dataset key -> dataset config, for every dataset some point needs."""
    code: dict[str, Any] = field(default_factory=dict)
    """User module -> its d5pipe.core.code_hash.ModuleCode, for every module some point uses."""
    more: dict[str, int] = field(default_factory=dict)
    """Configurations with more repetitions than ``repetitions`` (see :func:`build_plan`)."""

    def n_points(self) -> int:
        return sum(len(s.point_ids) for s in self.stages.values())


def shard_name(index: int) -> str:
    return f"s{index:05d}"


def dataset_key(dataset_cfg: dict[str, Any]) -> str:
    """Stable key of a dataset config (d5pipe.levels.dataset_key; torch-free)."""
    from d5pipe.levels.dataset_key import dataset_key as key

    return key(dataset_cfg)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


def readable_prefix(stage: str, params: dict[str, Any]) -> str:
    parts = []
    for k, v in params.items():
        short = k.rsplit(".", 1)[-1]
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, bool):
            parts.append(f"{short}{int(v)}")
        elif isinstance(v, (int, float)):
            parts.append(f"{short}{v}")
        else:
            parts.append(short)
    clean = [_UNSAFE.sub("_", part).strip("_.") for part in parts]
    text = "-".join(c for c in clean if c)[:48].rstrip("_-.")
    return text or stage


def repetition_config(cfg: dict[str, Any], rep: int) -> dict[str, Any]:
    """The config a repetition's ID hashes: the point's own for the first, plus ``repeat: r`` for
    the others (so raising ``repetitions`` keeps every existing record as repetition 0)."""
    return cfg if rep == 0 else {**cfg, REPEAT_AXIS: rep}


def point_id(stage: str, cfg: dict[str, Any], params: dict[str, Any], normalised: bool = False,
             code: dict[str, str] | None = None) -> str:
    """Readable prefix + 12 hex of the canonical resolved point config (key order irrelevant).

    ``normalised``: ``cfg`` is already in canonical form (d5pipe.core.canonical.normalise) — the
    planner normalises the stage base and the axis values once instead of per point. ``code``:
    user module -> source hash of the targets the point uses (hashed with the config when any).
    """
    data: dict[str, Any] = {"stage": stage, "config": cfg}
    if code:
        data["code"] = dict(code)
    h = digest(data, 12, normalised=normalised)
    return f"{readable_prefix(stage, params)}-{h}"


def by_node(axes: tuple[str, ...], points: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``points`` stably ordered by their ``placement.node`` value (unchanged without that axis)."""
    if NODE_AXIS not in axes:
        return points
    i = axes.index(NODE_AXIS)
    return sorted(points, key=lambda p: int(p[i]))


def node_groups(axes: tuple[str, ...], points: list[tuple[Any, ...]]) -> list[int]:
    """Lengths of the runs of equal ``placement.node`` in (ordered) ``points``: one group without it."""
    if NODE_AXIS not in axes or not points:
        return [len(points)]
    i = axes.index(NODE_AXIS)
    sizes: list[int] = []
    for k, p in enumerate(points):
        if k == 0 or p[i] != points[k - 1][i]:
            sizes.append(0)
        sizes[-1] += 1
    return sizes


def shard_bounds(costs: list[float], groups: list[int], pps: int, target_s: float, max_jobs: int) -> list[int]:
    """Shard boundaries packed within each group (a shard never mixes nodes); ``max_jobs`` is
    shared out among the groups by their number of points."""
    bounds = [0]
    start = 0
    for size in groups:
        part = costs[start:start + size]
        jobs = max(1, max_jobs * size // max(1, len(costs))) if max_jobs > 0 else 0
        local = fixed_bounds(size, pps, jobs) if pps > 0 else pack_by_cost(part, target_s, jobs)
        bounds += [start + b for b in local[1:]]
        start += size
    return bounds


def build_plan(config: dict[str, Any], more: Mapping[str, int] | None = None) -> Plan:
    """Expand the sweep of a resolved config into per-stage points and shards.

    ``config`` has passed d5pipe.config.validate.check_config (values, axes, fixed keys: checked
    there once, not again here); here every point
    is checked by its stage's ``validate`` target (cross-field rules such as a global batch
    divisible by the ranks), so a bad combination is one line naming the point, before any job.

    ``more``: ``"<stage>/<ID of the configuration's first repetition>" -> repetitions`` for the
    configurations that get more than ``repetitions`` (``RUN/plan/repetitions.json``, written by
    the until-decided mode, d5pipe.execute.decide). Within each repetition the points run in a
    random order drawn from the root seed (randomized interleaving: a drift in time hits every
    configuration alike, not the ones that happen to run last).
    """
    sweep_cfg = config.get("sweep") or {}
    has_axes = bool(sweep_cfg.get("grid") or sweep_cfg.get("zip"))
    if has_axes:
        axes, points = expand(sweep_cfg)
    else:
        if sweep_cfg.get("exclude"):
            raise D5PipeError("sweep.exclude: given but the sweep has no axes")
        axes, points = (), [()]
    root = int(config["seed"])
    reps = int(setting(config, RootConf, "repetitions"))
    more = dict(more or {})
    shards_cfg = config.get("shards")
    pps = int(setting(shards_cfg, ShardsConf, "points_per_shard"))
    target_s = float(setting(shards_cfg, ShardsConf, "target_s"))
    max_jobs = int(setting(shards_cfg, ShardsConf, "max_jobs_per_stage"))
    stages: dict[str, StagePlan] = {}
    datasets: dict[str, dict[str, Any]] = {}
    from d5pipe.core.allowlist import allow_list
    from d5pipe.core.code_hash import CodeCache

    code_cache = CodeCache(allow_list())
    for stage in config["stages"]:
        stages[stage] = _stage_plan(STAGES[stage], config, axes, points, reps, more, code_cache, datasets,
                                    (pps, target_s, max_jobs))
    if len({seed for sp in stages.values() for seed in sp.seeds}) != sum(len(sp.seeds) for sp in stages.values()):
        check_unique((f"{name}/{pid}", seed) for name, sp in stages.items() for pid, seed in zip(sp.point_ids, sp.seeds))
    return Plan(
        experiment=str(config["name"]),
        root_seed=root,
        config=config,
        config_hash=digest(config, 16),
        axes=axes,
        stages=stages,
        datasets=datasets,
        code=dict(code_cache.modules),
        more=more,
    )


def _stage_plan(entry: Level, config: dict[str, Any], axes: tuple[str, ...], points: list[tuple[Any, ...]],
                reps: int, more: Mapping[str, int], code_cache: Any, datasets: dict[str, dict[str, Any]],
                sizing: tuple[int, float, int]) -> StagePlan:
    """One stage's points (checked, d5pipe.plan.stage_points), repetitions, seeds, costs, shards."""
    stage, root = entry.name, int(config["seed"])
    keep = [a for a in axes if a.split(".", 1)[0] in set(entry.sections)]
    sub_axes, sub_points = project(axes, points, keep)
    sub_points = by_node(sub_axes, sub_points)  # a shard runs on one node: its points are consecutive
    sp = StagePoints(entry, normalise(stage_base(config, stage)), sub_axes, sub_points, code_cache)
    prefixes = [readable_prefix(stage, dict(zip(sub_axes, values))) for values in sub_points]
    first_ids = [sp.point_id(k, 0, prefixes[k]) for k in range(len(sub_points))]
    counts = [max(reps, int(more.get(f"{stage}/{pid}", 0))) for pid in first_ids]
    data_idx = [i for i, a in enumerate(sub_axes) if a.split(".", 1)[0] == "dataset"]
    dcache: dict[tuple[str, ...], str] = {}
    ids: list[str] = []
    seeds: list[int] = []
    dkeys: list[str] = []
    costs: list[float] = []
    mods: list[tuple[str, ...]] = []
    groups: list[int] = []
    planned: list[tuple[Any, ...]] = []
    sizes = node_groups(sub_axes, sub_points)
    # what a configuration's repetitions share is computed once per configuration: its cost,
    # dataset key and user modules (a repetition differs in its ID and seed alone)
    per_k: list[tuple[float, str, tuple[str, ...]] | None] = [None] * len(sub_points)
    # repetition-major: every point once, then every point again (in other shards, so other
    # processes, later in time); within a repetition and node, in a seeded random order
    for rep in range(max(counts, default=reps)):
        start = 0
        for size in sizes:
            order = [k for k in range(start, start + size) if counts[k] > rep]
            start += size
            if not order:
                continue
            random.Random(f"{root}/{stage}/{rep}").shuffle(order)
            groups.append(len(order))
            for k in order:
                shared = per_k[k]
                if shared is None:
                    cfg = sp.config(sp.values[k])
                    shared = per_k[k] = (
                        entry.cost(cfg),
                        _dataset_key(entry, cfg, tuple(sp.texts[k][i] for i in data_idx), dcache, datasets),
                        tuple(sorted(m for m in sp.code[k] if not m.startswith("file:"))))
                pid = first_ids[k] if rep == 0 else sp.point_id(k, rep, prefixes[k])
                planned.append((*sub_points[k], rep))
                costs.append(shared[0])
                dkeys.append(shared[1])
                mods.append(shared[2])
                ids.append(pid)
                seeds.append(point_seed(root, stage, pid))
    if max(counts, default=reps) > 1:
        out_axes, out_points = (*sub_axes, REPEAT_AXIS), planned
    else:
        out_axes, out_points = sub_axes, [p[:-1] for p in planned]
    if len(set(ids)) != len(ids):
        raise D5PipeError(f"sweep: stage {stage} has duplicate points (identical configs)")
    bounds = shard_bounds(costs, groups, *sizing)
    return StagePlan(stage, out_axes, ids, out_points, seeds, bounds, dkeys, mods, costs=costs)


def _dataset_key(entry: Level, cfg: dict[str, Any], axis_texts: tuple[str, ...], cache: dict[tuple[str, ...], str],
                 datasets: dict[str, dict[str, Any]]) -> str:
    """The point's dataset key ("" for a level without data), once per distinct dataset axes."""
    if not entry.needs_data:
        return ""
    key = cache.get(axis_texts)
    if key is None:
        key = cache[axis_texts] = dataset_key(cfg["dataset"])
        datasets[key] = cfg["dataset"]
    return key
