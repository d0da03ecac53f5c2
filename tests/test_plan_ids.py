"""Point IDs and seeds: stable across key order and processes, changed by any value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from d5pipe import D5PipeError
from d5pipe.config.validate import check_sweep
from d5pipe.core.seeds import all_distinct, check_unique, derive_seed, point_seed
from d5pipe.plan.build import build_plan, point_id


def _cfg(**sweep: object) -> dict:
    return {
        "name": "t",
        "seed": 7,
        "repetitions": 1,  # left out (null), a level's own number: level 0 measures each point in 10
        "stages": ["level0"],
        "shards": {"points_per_shard": 2, "max_jobs_per_stage": 0},
        "operators": {"op": "matmul", "size": 8, "batch": 1, "dtype": "float32", "extra": {"a": 1, "b": [1, 2]}},
        "timer": {"budget_s": 1.0},
        "recipe": {"fixed": [], "acceptance": []},
        "sweep": sweep or {"grid": {"operators.size": [8, 16, 32]}},
    }


def test_same_config_same_id_in_any_key_order() -> None:
    a = {"operators": {"op": "matmul", "size": 8, "extra": {"a": 1, "b": 2}}, "seed": 1}
    b = {"seed": 1, "operators": {"extra": {"b": 2, "a": 1}, "size": 8, "op": "matmul"}}
    assert point_id("level0", a, {"operators.size": 8}) == point_id("level0", b, {"operators.size": 8})


def test_any_value_change_gives_new_id() -> None:
    a = {"operators": {"op": "matmul", "size": 8}, "seed": 1}
    ids = {point_id("level0", a, {})}
    for changed in (
        {"operators": {"op": "matmul", "size": 9}, "seed": 1},
        {"operators": {"op": "softmax", "size": 8}, "seed": 1},
        {"operators": {"op": "matmul", "size": 8}, "seed": 2},
        {"operators": {"op": "matmul", "size": 8.5}, "seed": 1},
    ):
        ids.add(point_id("level0", changed, {}))
    assert len(ids) == 5


def test_ids_have_readable_prefix() -> None:
    plan = build_plan(_cfg())
    ids = plan.stages["level0"].point_ids
    assert sorted(i.split("-")[0] for i in ids) == ["size16", "size32", "size8"]  # in a seeded random order


def test_ids_stable_across_processes() -> None:
    code = (
        "import json,sys; from d5pipe.plan.build import build_plan; "
        "cfg=json.loads(sys.argv[1]); print(json.dumps(build_plan(cfg).stages['level0'].point_ids))"
    )
    cfg = _cfg()
    outs = []
    for hashseed in ("1", "2"):
        env = {"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-c", code, json.dumps(cfg)], capture_output=True,
                           text=True, env=env, check=True)
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1] == build_plan(cfg).stages["level0"].point_ids


def test_shards_pack_points() -> None:
    plan = build_plan(_cfg(grid={"operators.size": list(range(1, 11))}))
    sp = plan.stages["level0"]
    assert sp.n_shards == 5
    cfg = _cfg(grid={"operators.size": list(range(1, 1001))})
    cfg["shards"]["max_jobs_per_stage"] = 20
    assert build_plan(cfg).stages["level0"].n_shards <= 20


def test_seeds_derived_and_unique() -> None:
    assert derive_seed(1, "x") == derive_seed(1, "x")
    assert derive_seed(1, "x") != derive_seed(2, "x") != derive_seed(1, "y")
    plan = build_plan(_cfg())
    sp = plan.stages["level0"]
    assert list(sp.seeds) == [point_seed(7, "level0", p) for p in sp.point_ids]
    with pytest.raises(D5PipeError, match="seed collision"):
        check_unique([("a", 1), ("b", 1)])


def test_all_distinct_finds_a_repeated_seed_in_any_group() -> None:
    import random

    rng = random.Random(3)
    seeds = [rng.getrandbits(63) for _ in range(50_000)]
    assert all_distinct(seeds) and all_distinct(seeds[:10], seeds[10:])
    assert not all_distinct(seeds, [seeds[123]])
    assert not all_distinct(seeds[:20_000] + [seeds[7]] + seeds[20_000:])
    near = seeds[0] ^ 1  # the same bucket (top bits), another seed: distinct
    assert all_distinct([seeds[0], near]) and not all_distinct([seeds[0], near, seeds[0]])


def test_planned_points_read_like_lists() -> None:
    plan = build_plan({**_cfg(), "repetitions": 2})
    sp = plan.stages["level0"]
    params = list(sp.params)
    assert len(params) == 6 and all(isinstance(p, tuple) and len(p) == 2 for p in params)
    assert sp.params == params and params == sp.params and sp.params[1:3] == params[1:3]
    assert sp.params[-1] == params[-1] and params[0] in sp.params
    assert sorted(p[-1] for p in params) == [0, 0, 0, 1, 1, 1]  # the repetition index, last
    assert list(sp.costs) == [sp.costs[i] for i in range(6)] and sp.datasets == [""] * 6
    assert sp.modules == [()] * 6 and sp.costs != [0.0] * 6


def test_seeds_unique_over_100k_points() -> None:
    cfg = _cfg(grid={"operators.size": list(range(1, 1001)), "operators.batch": list(range(1, 101))})
    plan = build_plan(cfg)
    assert len(set(plan.stages["level0"].seeds)) == 100_000


@pytest.mark.parametrize(
    ("sweep", "culprit"),
    [
        ({"grid": {"operators.nope": [1]}}, "sweep axis 'operators.nope': no such config key"),
        ({"grid": {"executor.jobs": [1, 2]}}, "section 'executor' cannot be swept"),
    ],
)
def test_axis_errors(sweep: dict, culprit: str) -> None:
    with pytest.raises(D5PipeError, match=culprit.replace("(", r"\(").replace(")", r"\)")):
        check_sweep(_cfg(**sweep))  # in check_config, before the planner


def test_fixed_key_cannot_be_swept() -> None:
    cfg = _cfg()
    cfg["recipe"]["fixed"] = ["operators.size"]
    with pytest.raises(D5PipeError, match="recipe.fixed: sweep varies fixed key 'operators.size'"):
        check_sweep(cfg)


def test_planner_ids_equal_direct_ids() -> None:
    """The planner's pre-normalised fast path gives the same IDs as hashing each config whole."""
    from d5pipe.plan.point_config import point_config, stage_base

    cfg = _cfg(grid={"operators.size": [8, 16.0, 32]})
    plan = build_plan(cfg)
    base = stage_base(cfg, "level0")
    for pid, values in zip(plan.stages["level0"].point_ids, plan.stages["level0"].params):
        params = {"operators.size": values[0]}
        assert pid == point_id("level0", point_config(base, params), params)


def test_planned_costs_equal_each_points_own_cost() -> None:
    """A level's cost is computed once per distinct value of the keys it reads (Level.cost_reads):
    with those keys and others swept, every planned point still costs what its own config costs."""
    from d5pipe.levels.registry import STAGES
    from d5pipe.plan.point_config import point_config, stage_base

    cfg = _cfg(grid={"operators.size": [8, 16], "operators.impl": ["eager", "compile"],
                     "timer.budget_s": [0.5, 2.0]})
    cfg["repetitions"] = 2
    sp = build_plan(cfg).stages["level0"]
    base = stage_base(cfg, "level0")
    own = [STAGES["level0"].cost(point_config(base, dict(zip(sp.axes[:-1], values[:-1])))) for values in sp.params]
    assert list(sp.costs) == own and len(set(own)) == 4  # impl x budget: four costs, size reads none


@pytest.mark.parametrize("experiment", ["quickstart", "frameworks", "operator_sweep", "scaling", "train_digits"])
def test_shipped_experiments_keep_the_ids_and_seeds_they_had_before_the_level_units(experiment: str) -> None:
    """Issue 36 moved every level into its own package and rebuilt the planner; the IDs and seeds of
    the shipped experiments are those recorded at e3fb53f, before it (tests/data, made there with
    ``d5pipe run EXPERIMENT --dry-run`` at 3 repetitions), so old runs, bundles and histories still
    match point for point."""
    from pathlib import Path

    from d5pipe.config.compose import compose_plain

    recorded = json.loads((Path(__file__).parent / "data" / "before_36.json").read_text())
    plan = build_plan(compose_plain(experiment, ["repetitions=3"]))
    now = {stage: dict(zip(sp.point_ids, sp.seeds)) for stage, sp in plan.stages.items()}
    assert now == recorded["experiments"][experiment]
