"""Repetitions: planned as separate shard jobs with their own seeds and in a random order within
each repetition; more of them measure only the new ones; more for chosen configurations
(``plan/repetitions.json``, the until-decided mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from d5pipe.execute.run import load_plan
from d5pipe.plan.build import build_plan
from tests.conftest import TEST_CONF, d5pipe


def test_repetitions_are_separate_shards_with_their_own_seeds() -> None:
    one = load_plan("tiny", [], config_dirs=[TEST_CONF])
    three = load_plan("tiny", ["repetitions=3"], config_dirs=[TEST_CONF])
    sp1, sp3 = one.stages["level0"], three.stages["level0"]
    assert sp3.axes == (*sp1.axes, "repeat") and len(sp3.point_ids) == 3 * len(sp1.point_ids)
    assert sp3.point_ids[:len(sp1.point_ids)] == sp1.point_ids  # repetition 0 keeps the IDs and records
    assert len(set(sp3.point_ids)) == len(sp3.point_ids) and len(set(sp3.seeds)) == len(sp3.seeds)
    for i in range(sp3.n_shards):  # a shard (one process) never holds two repetitions
        assert len({sp3.params_dict(k)["repeat"] for k in sp3.shard_slice(i)}) == 1
    order = [sp3.params_dict(k)["repeat"] for k in range(len(sp3.point_ids))]
    assert order == sorted(order)  # every point once, then again: repetitions apart in time


def test_each_level_has_its_own_repetitions_unless_the_config_sets_them() -> None:
    """``repetitions: null`` (shipped): level 0's cheap points in 10 processes, the others in 3; a
    number sets every level's; ``d5pipe plan`` says which."""
    from d5pipe.execute.summary import format_summary, summarize

    shipped = load_plan("quickstart", [])
    counts = {st: {sp.params_dict(k)["repeat"] for k in range(len(sp.point_ids))} for st, sp in shipped.stages.items()}
    assert shipped.config["repetitions"] is None
    assert {st: len(c) for st, c in counts.items()} == {"level0": 10, "level1": 3, "level2": 3, "level3": 3}
    two = load_plan("quickstart", ["repetitions=2"])
    assert all(len({sp.params_dict(k)["repeat"] for k in range(len(sp.point_ids))}) == 2 for sp in two.stages.values())
    text = format_summary(summarize(shipped, Path("runs/x")))
    assert "repetitions: level0 10, level1 3, level2 3, level3 3" in text


def test_points_run_in_a_seeded_random_order_within_each_repetition() -> None:
    """Randomized interleaving: within a repetition the points' order is drawn from the root seed,
    so a baseline does not always run before its variants; the same seed gives the same order."""
    plan = load_plan("tiny", ["repetitions=4", "sweep.grid.operators.size=[8,16,24,32,40,48]"],
                     config_dirs=[TEST_CONF])
    sp = plan.stages["level0"]
    orders = [[sp.params_dict(k)["operators.size"] for k in range(len(sp.point_ids)) if sp.params_dict(k)["repeat"] == r]
              for r in range(4)]
    assert all(sorted(o) == [8, 16, 24, 32, 40, 48] for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not the same order every repetition
    again = build_plan(plan.config).stages["level0"]
    assert again.point_ids == sp.point_ids


def test_more_repetitions_for_chosen_configurations_only() -> None:
    plan = load_plan("tiny", ["repetitions=2"], config_dirs=[TEST_CONF])
    sp = plan.stages["level0"]
    first = [sp.point_ids[k] for k in range(len(sp.point_ids)) if sp.params_dict(k)["repeat"] == 0]
    grown = build_plan(plan.config, {f"level0/{first[0]}": 5}).stages["level0"]
    reps = [grown.params_dict(k)["repeat"] for k in range(len(grown.point_ids)) if grown.point_ids[k] != first[0]]
    assert len(grown.point_ids) == len(sp.point_ids) + 3 and max(reps) == 4
    assert set(sp.point_ids) <= set(grown.point_ids)  # the existing repetitions keep their IDs
    for i in range(grown.n_shards):  # still one repetition per shard
        assert len({grown.params_dict(k)["repeat"] for k in grown.shard_slice(i)}) == 1


@pytest.mark.slow
def test_raising_repetitions_measures_only_the_new_ones(tmp_path: Path) -> None:
    """A run with 1 repetition, then the same command with 2: the first's records are kept as they
    are (not re-measured), one new repetition of every point is."""
    out = tmp_path / "run"
    args = ["run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(out)]
    r = d5pipe(*args, "repetitions=1")
    assert r.returncode == 0, r.stderr[-2000:]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "points" / "level0").glob("*.json")}
    r = d5pipe(*args, "repetitions=2")
    assert r.returncode == 0, r.stderr[-2000:]
    after = {p.name: p.stat().st_mtime_ns for p in (out / "points" / "level0").glob("*.json")}
    assert {k: after[k] for k in before} == before  # not one old record rewritten
    new = [json.loads((out / "points" / "level0" / k).read_text()) for k in set(after) - set(before)]
    assert len(new) == len(before) and {rec["params"]["repeat"] for rec in new} == {1}


def test_level2_outcomes_over_repetitions_have_cis_and_say_not_reached() -> None:
    import pandas as pd

    from d5pipe.results.repetition_mean import repetition_mean as outcome
    from d5pipe.results.report.blocks import Table
    from d5pipe.results.report.levels.common import repetition_means

    o = outcome([0.90, 0.92, 0.94])
    assert o.mean == pytest.approx(0.92) and o.ci is not None and o.ci[0] < 0.92 < o.ci[1]
    assert outcome([float("nan")] * 3).text() == "not reached (0 of 3)"
    assert outcome([1.0, float("nan"), 3.0]).text().endswith("not reached in 1 of 3")
    nan = float("nan")
    rows = pd.DataFrame([
        {"stage": "level2", "point_id": f"{opt}{rep}", "status": "ok", "metric": metric, "value": value,
         "train.optimizer": opt, "repeat": rep}
        for rep in range(3) for opt, acc, tta in (("adam", 0.9 + rep / 100, 1.0 + rep), ("sgd", 0.5, nan))
        for metric, value in (("test_accuracy", acc), ("time_to_target_s", tta))])
    [table] = repetition_means(rows, ("test_accuracy", "train_loss", "time_to_target_s"))
    assert isinstance(table, Table) and table.columns == ["configuration", "repetitions", "test_accuracy",
                                                          "time_to_target_s"]
    by = {r[0]: r for r in table.rows}
    assert by["train.optimizer=adam"][1] == "3" and by["train.optimizer=adam"][2].startswith("0.91 [")
    assert by["train.optimizer=sgd"][3] == "not reached (0 of 3)"
    assert repetition_means(rows[rows["repeat"] == 0], ("test_accuracy",)) == []  # one repetition: no table
