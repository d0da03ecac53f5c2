"""Shards packed by expected cost: a job holds about ``shards.target_s`` seconds of work.

A job's start-up (interpreter, ``import torch``, Snakemake's job wrapper) costs seconds; shards
therefore hold an expected ``shards.target_s`` seconds of work (default 60: within the 30-120 s
the scheduler and the resume granularity like) instead of a fixed count of points. Each point's
expected seconds come from its level's cost model (``cost`` of d5pipe.levels.stage.Level; the
shared parts in d5pipe.levels.cost_model). ``d5pipe plan`` shows the expected seconds per job;
``shards.points_per_shard`` (> 0) and ``shards.max_jobs_per_stage`` still override.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
