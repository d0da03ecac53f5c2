"""The plan a run directory remembers (d5pipe.plan.cache): used only for the very same config,
d5pipe and allow-list, never for plans with user code, never trusted when unreadable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from d5pipe.plan import cache
from d5pipe.plan.build import Plan, build_plan


def _cfg(sizes: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "name": "c", "seed": 7, "stages": ["level0"],
        "shards": {"points_per_shard": 2, "max_jobs_per_stage": 0},
        "operators": {"op": "matmul", "size": 8, "batch": 1, "dtype": "float32"},
        "timer": {"budget_s": 1.0},
        "recipe": {"fixed": [], "acceptance": []},
        "sweep": {"grid": {"operators.size": sizes, "operators.dtype": ["float32", "float64"]}},
        **extra,
    }


def _same(a: Plan, b: Plan) -> None:
    assert (a.experiment, a.root_seed, a.config_hash, a.axes, a.datasets) == \
           (b.experiment, b.root_seed, b.config_hash, b.axes, b.datasets)
    assert list(a.stages) == list(b.stages)
    for s in a.stages:
        x, y = a.stages[s], b.stages[s]
        assert (x.axes, x.point_ids, x.params, x.seeds, x.bounds, x.datasets, x.modules, x.costs) == \
               (y.axes, y.point_ids, y.params, y.seeds, y.bounds, y.datasets, y.modules, y.costs)


def test_a_stored_plan_comes_back_equal_for_the_same_config(tmp_path: Path) -> None:
    config = _cfg([8, 16, 24])
    plan = build_plan(config)
    assert cache.load(tmp_path, config) is None  # nothing stored yet
    cache.store(tmp_path, plan)
    again = cache.load(tmp_path, json.loads(json.dumps(config)))
    assert again is not None
    _same(plan, again)
    first = again.stages["level0"].params[0]
    assert isinstance(first, tuple) and first in plan.stages["level0"].params  # tuples, as the planner makes them


@pytest.mark.parametrize("change", [
    lambda c: c["sweep"]["grid"].update({"operators.size": [8, 16, 32]}),  # a sweep value
    lambda c: c.update(seed=8),  # the root seed
    lambda c: c["timer"].update(budget_s=2.0),  # a fixed value
    lambda c: c["shards"].update(points_per_shard=3),  # the sharding
])
def test_any_change_of_the_config_is_a_miss(tmp_path: Path, change: Any) -> None:
    config = _cfg([8, 16, 24])
    cache.store(tmp_path, build_plan(config))
    changed = json.loads(json.dumps(config))
    change(changed)
    assert cache.load(tmp_path, changed) is None


def test_another_allow_list_or_another_d5pipe_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _cfg([8])
    cache.store(tmp_path, build_plan(config))
    assert cache.load(tmp_path, config) is not None
    monkeypatch.setenv("D5PIPE_ALLOW", "somepkg")  # the runner's allow-list is part of the key
    assert cache.load(tmp_path, config) is None
    monkeypatch.delenv("D5PIPE_ALLOW")
    assert cache.load(tmp_path, config) is not None
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "another d5pipe")
    assert cache.load(tmp_path, config) is None


def test_a_plan_with_user_code_is_not_stored(tmp_path: Path) -> None:
    config = _cfg([8])
    plan = build_plan(config)
    cache.store(tmp_path, plan)
    assert (tmp_path / cache.CACHE_FILE).exists()
    plan.code = {"userpkg.ops": object()}  # what build_plan records for points using user modules
    cache.store(tmp_path, plan)
    assert not (tmp_path / cache.CACHE_FILE).exists()  # and the old entry is gone
    assert cache.load(tmp_path, config) is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"key": 1}', "null"])
def test_an_unreadable_or_foreign_file_is_a_miss(tmp_path: Path, text: str) -> None:
    (tmp_path / cache.CACHE_FILE).write_text(text)
    assert cache.load(tmp_path, _cfg([8])) is None


def test_a_tampered_entry_with_the_right_key_but_broken_fields_is_a_miss(tmp_path: Path) -> None:
    config = _cfg([8, 16])
    cache.store(tmp_path, build_plan(config))
    data = json.loads((tmp_path / cache.CACHE_FILE).read_text())
    del data["stages"]["level0"]["seeds"]
    (tmp_path / cache.CACHE_FILE).write_text(json.dumps(data))
    assert cache.load(tmp_path, config) is None


def test_the_cache_is_not_part_of_a_bundle(tmp_path: Path) -> None:
    from d5pipe.provenance.bundle import bundle_files

    (tmp_path / "config.yaml").write_text("name: c\n")
    cache.store(tmp_path, build_plan(_cfg([8])))
    assert bundle_files(tmp_path) == ["config.yaml"]
