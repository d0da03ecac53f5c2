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

import itertools
import random
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d5pipe.config.schema import ShardsConf
from d5pipe.core.canonical import digest, normalise
from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.core.seeds import all_distinct, check_unique, point_seeds
from d5pipe.levels.dataset_key import dataset_key
from d5pipe.levels.registry import NODE_AXIS, STAGES
from d5pipe.levels.stage import Level
from d5pipe.plan.cost import fixed_bounds, pack_by_cost
from d5pipe.plan.point_config import REPEAT_AXIS, stage_base, stage_repetitions
from d5pipe.plan.stage_points import Gathered, PrefixesOf, RepeatedPoints, StagePoints, reading_axes
from d5pipe.plan.sweep import expand, project

PLAN_SCHEMA_VERSION = 1


@dataclass
class StagePlan:
    stage: str
    axes: tuple[str, ...]
    point_ids: list[str]
    params: Sequence[tuple[Any, ...]]
    """Per point, its values on :attr:`axes` (a list, or d5pipe.plan.stage_points.RepeatedPoints)."""
    seeds: Sequence[int]
    """Per point, its seed (an ``array('q')`` from the planner: 8 bytes a point)."""
    bounds: list[int]
    """Shard boundaries: shard ``i`` holds points ``bounds[i]`` to ``bounds[i + 1] - 1``."""
    datasets: Sequence[str] = field(default_factory=list)
    """Per point, the dataset key it needs ("" for stages without data)."""
    modules: Sequence[tuple[str, ...]] = field(default_factory=list)
    """Per point, the user modules whose code its ID includes (empty for built-ins only)."""
    costs: Sequence[float] = field(default_factory=list)
    """Per point, its expected seconds of work (its level's ``cost``, d5pipe.levels.stage.Level)."""
    builds: Sequence[tuple[str, ...]] = field(default_factory=list)
    """Per point, the build keys it needs (its level's ``builds``; empty for most)."""

    def point_builds(self, i: int) -> list[str]:
        return list(self.builds[i]) if self.builds else []

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
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Build key -> what the ``build_operator`` job builds, for every build some point needs."""
    code: dict[str, Any] = field(default_factory=dict)
    """User module -> its d5pipe.core.code_hash.ModuleCode, for every module some point uses."""
    more: dict[str, int] = field(default_factory=dict)
    """Configurations with more repetitions than ``repetitions`` (see :func:`build_plan`)."""

    def n_points(self) -> int:
        return sum(len(s.point_ids) for s in self.stages.values())


def shard_name(index: int) -> str:
    return f"s{index:05d}"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


def _prefix_part(key: str, value: Any) -> str:
    """One axis's part of a readable prefix (cleaned; "" when nothing readable is left)."""
    short = key.rsplit(".", 1)[-1]
    if isinstance(value, str):
        part = value
    elif isinstance(value, bool):
        part = f"{short}{int(value)}"
    elif isinstance(value, (int, float)):
        part = f"{short}{value}"
    else:
        part = short
    return _UNSAFE.sub("_", part).strip("_.")


def _join_prefix(stage: str, parts: Sequence[str]) -> str:
    text = "-".join(c for c in parts if c)[:48].rstrip("_-.")
    return text or stage


def readable_prefix(stage: str, params: dict[str, Any]) -> str:
    return _join_prefix(stage, [_prefix_part(k, v) for k, v in params.items()])


def readable_prefixes(stage: str, axes: Sequence[str], points: Sequence[tuple[Any, ...]],
                      texts: Sequence[tuple[str, ...]]) -> list[str]:
    """:func:`readable_prefix` of every point, each axis value's part made once (keyed by the
    value's canonical JSON ``texts`` and its type: 1 and 1.0 hash alike but read differently)."""
    cache: dict[tuple[int, str, type], str] = {}
    out = []
    for values, vtexts in zip(points, texts):
        parts = []
        for i, (v, t) in enumerate(zip(values, vtexts)):
            key = (i, t, type(v))
            part = cache.get(key)
            if part is None:
                part = cache[key] = _prefix_part(axes[i], v)
            parts.append(part)
        out.append(_join_prefix(stage, parts))
    return out


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
    return [len(list(run)) for _, run in itertools.groupby(points, key=lambda p: p[i])]


def shard_bounds(costs: Sequence[float], groups: list[int], pps: int, target_s: float, max_jobs: int) -> list[int]:
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
    more = dict(more or {})
    shards_cfg = config.get("shards")
    pps = int(setting(shards_cfg, ShardsConf, "points_per_shard"))
    target_s = float(setting(shards_cfg, ShardsConf, "target_s"))
    max_jobs = int(setting(shards_cfg, ShardsConf, "max_jobs_per_stage"))
    stages: dict[str, StagePlan] = {}
    datasets: dict[str, dict[str, Any]] = {}
    builds: dict[str, dict[str, Any]] = {}
    from d5pipe.core.allowlist import allow_list
    from d5pipe.core.code_hash import CodeCache

    code_cache = CodeCache(allow_list())
    for stage in config["stages"]:
        stages[stage] = _stage_plan(STAGES[stage], config, axes, points, stage_repetitions(config, stage), more,
                                    code_cache, datasets, (pps, target_s, max_jobs), builds)
    if not all_distinct(*(sp.seeds for sp in stages.values())):  # equal IDs give equal seeds too
        check_unique((f"{name}/{pid}", seed) for name, sp in stages.items() for pid, seed in zip(sp.point_ids, sp.seeds))
    return Plan(
        experiment=str(config["name"]),
        root_seed=root,
        config=config,
        config_hash=digest(config, 16),
        axes=axes,
        stages=stages,
        datasets=datasets,
        builds=builds,
        code=dict(code_cache.modules),
        more=more,
    )


def _stage_plan(entry: Level, config: dict[str, Any], axes: tuple[str, ...], points: list[tuple[Any, ...]],
                reps: int, more: Mapping[str, int], code_cache: Any, datasets: dict[str, dict[str, Any]],
                sizing: tuple[int, float, int], builds: dict[str, dict[str, Any]]) -> StagePlan:
    """One stage's points (checked, d5pipe.plan.stage_points), repetitions, seeds, costs, shards."""
    stage, root = entry.name, int(config["seed"])
    keep = [a for a in axes if a.split(".", 1)[0] in set(entry.sections)]
    sub_axes, sub_points = project(axes, points, keep)
    sub_points = by_node(sub_axes, sub_points)  # a shard runs on one node: its points are consecutive
    sp = StagePoints(entry, normalise(stage_base(config, stage)), sub_axes, sub_points, code_cache)
    first_ids = sp.point_ids(range(len(sub_points)), 0, readable_prefixes(stage, sub_axes, sub_points, sp.texts))
    prefixes = PrefixesOf(first_ids)
    counts = [max(reps, int(more.get(f"{stage}/{pid}", 0))) for pid in first_ids] if more else [reps] * len(first_ids)
    # what a configuration's repetitions share is computed once per configuration (a repetition
    # differs in its ID and seed alone), and each once per distinct value of the axes it reads:
    # its cost (the level's cost_reads), dataset key (the dataset axes) and user modules (its code)
    cost_idx = reading_axes(sub_axes, entry.cost_reads)
    data_idx = [i for i, a in enumerate(sub_axes) if a.split(".", 1)[0] == "dataset"] if entry.needs_data else []
    positions = sp.texts.positions
    costs_seen: dict[tuple[int, ...], float] = {}
    one: dict[float, float] = {}  # equal costs as one float object
    dcache: dict[tuple[int, ...], str] = {}
    mods_seen: dict[int, tuple[str, ...]] = {}
    cost_k: list[float] = []
    dkey_k: list[str] = []
    mods_k: list[tuple[str, ...]] = []
    builds_k: list[tuple[str, ...]] = []
    for k in range(len(sub_points)):
        key = tuple([positions[i][k] for i in cost_idx])
        cost = costs_seen.get(key)
        if cost is None:
            cost = entry.cost(sp.config(sp.values[k]))
            cost = costs_seen[key] = one.setdefault(cost, cost)
        cost_k.append(cost)
        dkey_k.append(_dataset_key(entry, sp, k, tuple([positions[i][k] for i in data_idx]), dcache, datasets))
        user = mods_seen.get(id(sp.code[k]))
        if user is None:
            user = mods_seen[id(sp.code[k])] = tuple(sorted(m for m in sp.code[k] if not m.startswith("file:")))
        mods_k.append(user)
        needed = sp.builds[k]
        if needed:  # most points need no build: nothing sorted or copied for them
            builds.update(needed)
        builds_k.append(tuple(sorted(needed)) if needed else ())
    ids: list[str] = []
    seeds = array("q")
    groups: list[int] = []
    planned_k = array("I")
    planned_rep = array("I")
    sizes = node_groups(sub_axes, sub_points)
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
            rep_ids = [first_ids[k] for k in order] if rep == 0 else sp.point_ids(order, rep, prefixes)
            ids += rep_ids
            seeds.extend(point_seeds(root, stage, rep_ids))
            planned_k.extend(order)
            planned_rep.extend([rep] * len(order))
    out_points: Sequence[tuple[Any, ...]]
    if max(counts, default=reps) > 1:
        out_axes, out_points = (*sub_axes, REPEAT_AXIS), RepeatedPoints(sub_points, planned_k, planned_rep)
    else:
        out_axes, out_points = sub_axes, [sub_points[k] for k in planned_k]
    if len(set(first_ids)) != len(first_ids):  # a repetition's ID hashes its configuration's and its index
        raise D5PipeError(f"sweep: stage {stage} has duplicate points (identical configs)")
    costs, dkeys, mods = Gathered(cost_k, planned_k), Gathered(dkey_k, planned_k), Gathered(mods_k, planned_k)
    bounds = shard_bounds(costs, groups, *sizing)
    needs = Gathered(builds_k, planned_k) if any(builds_k) else []
    return StagePlan(stage, out_axes, ids, out_points, seeds, bounds, dkeys, mods, costs=costs, builds=needs)


def _dataset_key(entry: Level, sp: StagePoints, k: int, axis_values: tuple[int, ...], cache: dict[tuple[int, ...], str],
                 datasets: dict[str, dict[str, Any]]) -> str:
    """Point ``k``'s dataset key ("" for a level without data), once per distinct dataset axes."""
    if not entry.needs_data:
        return ""
    key = cache.get(axis_values)
    if key is None:
        dataset = sp.config(sp.values[k])["dataset"]
        key = cache[axis_values] = dataset_key(dataset)
        datasets[key] = dataset
    return key
