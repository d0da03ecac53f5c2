"""Repetitions: planned as separate shard jobs with their own seeds, compared across processes
by one rule (d5pipe.results.repetitions)."""

from __future__ import annotations

import numpy as np
import pytest

from d5pipe.execute.run import load_plan
from d5pipe.results.repetitions import family_alpha, ratio_test
from tests.conftest import TEST_CONF


def test_one_process_per_side_is_not_compared() -> None:
    t = ratio_test([1.0], [3.0], 0.05)
    assert not t.changed and t.p_value is None and "one process per side" in t.reason
    assert ratio_test([1.0, 1.1], [3.0], 0.05).reason.startswith("one process per side (2 vs 1")


def test_identical_sides_are_no_difference_and_constants_are_exact() -> None:
    t = ratio_test([1.0, 1.2, 0.9], [1.0, 1.2, 0.9], 0.05)
    assert not t.changed and t.p_value == pytest.approx(1.0) and t.ratio == pytest.approx(1.0)
    assert ratio_test([2.0, 2.0], [3.0, 3.0], 0.05).changed
    assert not ratio_test([2.0, 2.0], [2.0, 2.0], 0.05).changed


def test_the_verdict_needs_the_ci_to_exclude_one_and_the_test_to_agree() -> None:
    """One rule: across many random pairs, 'changed' is exactly 'CI excludes 1 and p < alpha', and
    the CI and the test never disagree (they come from one t distribution)."""
    rng = np.random.default_rng(3)
    for _ in range(400):
        a = rng.lognormal(0.0, 0.1, size=4)
        b = rng.lognormal(float(rng.choice([0.0, 0.1, 0.3])), 0.1, size=5)
        t = ratio_test(a.tolist(), b.tolist(), 0.05)
        assert t.ci is not None and t.p_value is not None and t.ratio is not None
        excludes = t.ci[0] > 1 or t.ci[1] < 1
        assert t.changed == (excludes and t.p_value < 0.05)
        assert excludes == (t.p_value < 0.05)
        assert t.ci[0] <= t.ratio <= t.ci[1]


def test_a_a_false_positives_stay_below_the_family_level_and_a_25pct_slowdown_is_found() -> None:
    """Simulated processes (between-process noise 10%): 30 timings compared together, 5 repetitions
    per side. Same distribution: a false 'changed' anywhere in the family in at most ~alpha of
    the comparisons. Every timing 25% slower: found in every comparison."""
    rng = np.random.default_rng(11)
    alpha = family_alpha(0.05, 30)
    families, false = 200, 0
    for _ in range(families):
        hits = [ratio_test(rng.lognormal(0, 0.1, 5).tolist(), rng.lognormal(0, 0.1, 5).tolist(), alpha).changed
                for _ in range(30)]
        false += any(hits)
    assert false / families <= 0.08
    slow = [ratio_test(rng.lognormal(0, 0.02, 5).tolist(), rng.lognormal(np.log(1.25), 0.02, 5).tolist(),
                       alpha).changed for _ in range(50)]
    assert all(slow)


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


def test_level2_outcomes_over_repetitions_have_cis_and_say_not_reached() -> None:
    import pandas as pd

    from d5pipe.results.repetitions import outcome
    from d5pipe.results.report.blocks import Table
    from d5pipe.results.report.levels import repetition_outcomes

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
    [table] = repetition_outcomes(rows, ("test_accuracy", "train_loss", "time_to_target_s"))
    assert isinstance(table, Table) and table.columns == ["configuration", "repetitions", "test_accuracy",
                                                          "time_to_target_s"]
    by = {r[0]: r for r in table.rows}
    assert by["train.optimizer=adam"][1] == "3" and by["train.optimizer=adam"][2].startswith("0.91 [")
    assert by["train.optimizer=sgd"][3] == "not reached (0 of 3)"
    assert repetition_outcomes(rows[rows["repeat"] == 0], ("test_accuracy",)) == []  # one repetition: no table
