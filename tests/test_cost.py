"""Shard sizing by expected cost: each level's estimate of a point (its ``stage.py``, with the shared
parts in d5pipe.levels.cost_model) and the packing (d5pipe.plan.cost)."""

from __future__ import annotations

import pytest

from d5pipe.levels.cost_model import POINT_FIXED_S
from d5pipe.levels.registry import STAGES
from d5pipe.plan.cost import fixed_bounds, pack_by_cost


def point_cost_s(stage: str, cfg: dict[str, object]) -> float:
    return STAGES[stage].cost(cfg)


DEFAULT_TIMER = {"warmup_s": 0.05, "budget_s": 2.0, "min_block_s": 0.01, "max_samples": 1000}


def test_a_level0_point_costs_its_warmup_and_budget_by_default() -> None:
    cost = point_cost_s("level0", {"timer": DEFAULT_TIMER, "operators": {"impl": "eager"}})
    assert cost == pytest.approx(POINT_FIXED_S + 0.05 + 2.0)


def test_few_short_samples_stop_before_the_budget() -> None:
    timer = {**DEFAULT_TIMER, "warmup_s": 0.0, "min_block_s": 1e-5, "max_samples": 10, "budget_s": 0.05}
    assert point_cost_s("level0", {"timer": timer}) == pytest.approx(POINT_FIXED_S + 1e-4)
    timer = {**DEFAULT_TIMER, "warmup_s": 0.0, "min_block_s": 0.5, "max_samples": 10, "budget_s": 0.05}
    assert point_cost_s("level0", {"timer": timer}) == pytest.approx(POINT_FIXED_S + 0.05), "capped by the budget"


def test_compile_and_level1_sites_add_up() -> None:
    eager = point_cost_s("level1", {"timer": DEFAULT_TIMER, "level1": {"measure_memory": False}})
    with_memory = point_cost_s("level1", {"timer": DEFAULT_TIMER, "level1": {}})
    compiled = point_cost_s("level0", {"timer": DEFAULT_TIMER, "operators": {"impl": "compile"}})
    assert with_memory - POINT_FIXED_S == pytest.approx(2 * (eager - POINT_FIXED_S))
    assert compiled > point_cost_s("level0", {"timer": DEFAULT_TIMER}) + 10


def test_level2_and_level3_grow_with_their_work() -> None:
    short = point_cost_s("level2", {"train": {"epochs": 1, "batch_size": 32}})
    long = point_cost_s("level2", {"train": {"epochs": 4, "batch_size": 32}})
    assert long - POINT_FIXED_S == pytest.approx(4 * (short - POINT_FIXED_S))
    two = point_cost_s("level3", {"distributed": {"ranks": 2, "steps": 100, "serial_check": False}})
    four = point_cost_s("level3", {"distributed": {"ranks": 4, "steps": 100, "serial_check": False}})
    assert four > two > POINT_FIXED_S


def test_pack_by_cost_fills_shards_to_the_target() -> None:
    assert pack_by_cost([1.0] * 10, 3.0) == [0, 3, 6, 9, 10]
    assert pack_by_cost([5.0, 1.0, 1.0], 3.0) == [0, 1, 3], "an expensive point is a shard of its own"
    assert pack_by_cost([], 3.0) == [0]
    assert pack_by_cost([1.0] * 10, 1.0, max_jobs=2) == [0, 5, 10], "max_jobs grows the target"


def test_fixed_bounds_respect_max_jobs() -> None:
    assert fixed_bounds(10, 4) == [0, 4, 8, 10]
    assert fixed_bounds(10, 2, max_jobs=3) == [0, 4, 8, 10]
    assert fixed_bounds(0, 4) == [0]
