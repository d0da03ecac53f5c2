"""Expected seconds of work per point, from its config alone (torch-free), to size shards by cost.

A job's start-up (interpreter, ``import torch``, Snakemake's job wrapper) costs seconds; shards
therefore hold an expected ``shards.target_s`` seconds of work (default 60: within the 30-120 s
the scheduler and the resume granularity like) instead of a fixed count of points. The estimate
is deliberately simple and documented, not measured:

* every point: ``timer.warmup_s`` plus the timed part per timed call site, plus
  :data:`POINT_FIXED_S` of set-up and checks. The timed part is ``timer.budget_s``, or
  ``timer.max_samples x timer.min_block_s`` when that is less: blocks of calls shorter than
  ``min_block_s`` last about ``min_block_s``, so a point with few samples of a fast operator stops
  long before its budget (calls slower than a block make this an underestimate, capped by the budget);
* level 0: one call site; ``impl: compile`` adds :data:`COMPILE_S`; the machine peak is measured
  once per shard (not per point);
* level 1: two call sites (inference, forward+backward) and, with memory measurement, two more
  short passes; ``compile`` adds 2 x :data:`COMPILE_S`;
* level 2: ``epochs x steps per epoch x`` :data:`STEP_S` (a small model on a CPU), plus two
  evaluations per epoch;
* level 3: ``(warmup_steps + steps) x`` :data:`STEP_S` ``x ranks`` (the cores are shared), plus
  the serial check's steps; a rank session's launch is paid once per shard.

``d5pipe plan`` shows the expected seconds per job; ``shards.points_per_shard`` (> 0) and
``shards.max_jobs_per_stage`` still override.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

POINT_FIXED_S = 0.05
COMPILE_S = 15.0
STEP_S = 0.005
EVAL_S = 0.05
DEFAULT_TRAIN_SAMPLES = 1500
"""Training samples assumed when the dataset's size is not in its config (digits: 1347)."""


def _timed(cfg: Mapping[str, Any], sites: int) -> float:
    timer = cfg.get("timer") or {}
    budget = float(timer.get("budget_s", 2.0) or 0)
    by_samples = float(timer.get("max_samples", 1000) or 0) * float(timer.get("min_block_s", 0.01) or 0)
    per_site = float(timer.get("warmup_s", 0.05) or 0) + (min(budget, by_samples) if by_samples > 0 else budget)
    return sites * per_site


def _train_samples(cfg: Mapping[str, Any]) -> float:
    ds = cfg.get("dataset") or {}
    if ds.get("name") in ("synthetic", "synthetic_images", "synthetic_tokens"):
        return float(ds.get("n_samples", 2048)) * (1 - float(ds.get("test_fraction", 0.25)))
    return float(DEFAULT_TRAIN_SAMPLES)


def point_cost_s(stage: str, cfg: Mapping[str, Any]) -> float:
    """Expected seconds of one point of ``stage`` with resolved config ``cfg`` (see docstring)."""
    if stage == "level0":
        ops = cfg.get("operators") or {}
        return POINT_FIXED_S + _timed(cfg, 1) + (COMPILE_S if ops.get("impl") == "compile" else 0.0)
    if stage == "level1":
        l1 = cfg.get("level1") or {}
        sites = 2 + (2 if l1.get("measure_memory", True) else 0)
        return POINT_FIXED_S + _timed(cfg, sites) + (2 * COMPILE_S if l1.get("impl") == "compile" else 0.0)
    if stage == "level2":
        train = cfg.get("train") or {}
        epochs = int(train.get("epochs", 5) or 1)
        steps = math.ceil(_train_samples(cfg) / max(1, int(train.get("batch_size", 32) or 32)))
        return POINT_FIXED_S + epochs * (steps * STEP_S + 2 * EVAL_S)
    if stage == "level3":
        dist = cfg.get("distributed") or {}
        steps = int(dist.get("warmup_steps", 3) or 0) + int(dist.get("steps", 20) or 0)
        ranks = int(dist.get("ranks", 1) or 1)
        serial = steps * STEP_S if dist.get("serial_check", True) else 0.0
        return POINT_FIXED_S + steps * STEP_S * ranks + serial
    return POINT_FIXED_S + _timed(cfg, 1)


def pack_by_cost(costs: Sequence[float], target_s: float, max_jobs: int = 0) -> list[int]:
    """Shard boundaries ``[0, b1, ..., n]``: consecutive points until a shard's expected work
    reaches ``target_s``; with ``max_jobs`` > 0 the target grows so no more shards result."""
    n = len(costs)
    if n == 0:
        return [0]
    total = float(sum(costs))
    target = max(target_s, total / max_jobs) if max_jobs > 0 else target_s
    bounds = [0]
    acc = 0.0
    for i, c in enumerate(costs):
        acc += c
        if acc >= target and i + 1 < n:
            bounds.append(i + 1)
            acc = 0.0
    bounds.append(n)
    return bounds


def fixed_bounds(n: int, per_shard: int, max_jobs: int = 0) -> list[int]:
    """Boundaries for ``per_shard`` points per shard (grown so no more than ``max_jobs`` shards)."""
    if max_jobs > 0 and math.ceil(n / per_shard) > max_jobs:
        per_shard = math.ceil(n / max_jobs)
    return [*range(0, n, per_shard), n] if n else [0]
