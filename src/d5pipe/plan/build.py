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

from d5pipe.core.canonical import canonical_json, digest, normalise
from d5pipe.core.errors import D5PipeError
from d5pipe.core.seeds import check_unique, point_seed
from d5pipe.core.stages import NODE_AXIS, STAGES, load_target
from d5pipe.plan.cost import fixed_bounds, pack_by_cost, point_cost_s
from d5pipe.plan.point_config import REPEAT_AXIS, point_config, stage_base
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
    """Per point, its expected seconds of work (d5pipe.plan.cost)."""

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


def _code_of(targets_fn: Any, cfg: dict[str, Any], cache: Any) -> dict[str, str]:
    """Module -> source hash of the user targets ``cfg`` uses (allow-list checked by check_point)."""
    code: dict[str, str] = {}
    for _key, path in targets_fn(cfg):
        mc = cache.of(path)
        if mc is not None:
            code[mc.module] = mc.sha256
    return code


def _file_identity(stage: str, cfg: dict[str, Any]) -> dict[str, str]:
    """``{"file:<path>": sha256}`` of a file a point reads as its network (``level1.onnx_file``): its
    content, not only its path, is part of the point's identity."""
    from d5pipe.core.atomic import file_sha256

    path = (cfg.get("level1") or {}).get("onnx_file") if stage == "level1" else None
    if not path:
        return {}
    return {f"file:{path}": file_sha256(str(path))}


def _point_error(stage: str, params: dict[str, Any], exc: D5PipeError) -> D5PipeError:
    where = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return D5PipeError(f"{exc} (sweep point {stage} {where})" if where else str(exc))


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
    reps = int(config.get("repetitions", 1) or 1)
    more = dict(more or {})
    shards_cfg = config.get("shards", {})
    pps = int(shards_cfg.get("points_per_shard", 0) or 0)
    target_s = float(shards_cfg.get("target_s", 60.0) or 60.0)
    max_jobs = int(shards_cfg.get("max_jobs_per_stage", 0) or 0)
    stages: dict[str, StagePlan] = {}
    datasets: dict[str, dict[str, Any]] = {}
    all_seeds: list[tuple[str, int]] = []
    from d5pipe.core.allowlist import allow_list
    from d5pipe.core.code_hash import CodeCache

    code_cache = CodeCache(allow_list())
    for stage in config["stages"]:
        entry = STAGES[stage]
        check_point = load_target(entry.validate)  # torch-free, per point: cross-field checks
        targets_fn = load_target(f"{entry.validate.partition(':')[0]}:used_targets")
        sections = set(entry.sections)
        keep = [a for a in axes if a.split(".", 1)[0] in sections]
        sub_axes, sub_points = project(axes, points, keep)
        base = normalise(stage_base(config, stage))
        sub_points = by_node(sub_axes, sub_points)  # a shard runs on one node: its points are consecutive
        ids: list[str] = []
        seeds: list[int] = []
        dkeys: list[str] = []
        costs: list[float] = []
        mods: list[tuple[str, ...]] = []
        dcache: dict[str, str] = {}
        configs: list[tuple[dict[str, Any], dict[str, str], dict[str, str]]] = []
        for values in sub_points:
            params = dict(zip(sub_axes, values))
            cfg = point_config(base, {k: normalise(v) for k, v in params.items()})
            try:
                check_point(cfg)
                configs.append((cfg, _code_of(targets_fn, cfg, code_cache), _file_identity(stage, cfg)))
            except D5PipeError as exc:
                raise _point_error(stage, params, exc) from None
        first_ids = [point_id(stage, cfg, dict(zip(sub_axes, values)), normalised=True, code={**code, **files})
                     for values, (cfg, code, files) in zip(sub_points, configs)]
        counts = [max(reps, int(more.get(f"{stage}/{pid}", 0))) for pid in first_ids]
        groups: list[int] = []
        planned: list[tuple[Any, ...]] = []
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
                for k in order:
                    values = sub_points[k]
                    cfg, code, files = configs[k]
                    params = dict(zip(sub_axes, values))
                    pid = first_ids[k] if rep == 0 else point_id(stage, repetition_config(cfg, rep), params,
                                                                 normalised=True, code={**code, **files})
                    planned.append((*values, rep))
                    mods.append(tuple(sorted(code)))
                    ids.append(pid)
                    costs.append(point_cost_s(stage, cfg))
                    s = point_seed(root, stage, pid)
                    seeds.append(s)
                    all_seeds.append((f"{stage}/{pid}", s))
                    if entry.needs_data:
                        dcanon = canonical_json(cfg["dataset"])
                        key = dcache.get(dcanon)
                        if key is None:
                            key = dataset_key(cfg["dataset"])
                            dcache[dcanon] = key
                            datasets[key] = cfg["dataset"]
                        dkeys.append(key)
                    else:
                        dkeys.append("")
        if max(counts, default=reps) > 1:
            sub_points = planned
            sub_axes = (*sub_axes, REPEAT_AXIS)
        else:
            sub_points = [p[:-1] for p in planned]
        if len(set(ids)) != len(ids):
            raise D5PipeError(f"sweep: stage {stage} has duplicate points (identical configs)")
        bounds = shard_bounds(costs, groups, pps, target_s, max_jobs)
        stages[stage] = StagePlan(stage, sub_axes, ids, sub_points, seeds, bounds, dkeys, mods, costs=costs)
    check_unique(all_seeds)
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
