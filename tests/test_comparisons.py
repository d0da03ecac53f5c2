"""d5pipe.results.comparisons: the CI of the speedup covers the truth, the test keeps its level,
and only points that differ in exactly the compared factor are paired."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from d5pipe.results.comparisons import (
    FACTORS,
    alpha_of,
    baseline_of,
    compare_pair,
    comparisons,
    ratio_ci,
)

TRUE_RATIO = 1.3
DRAWS = 200


def lognormal_pair(rng: np.random.Generator, n: int, ratio: float, sigma: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """Baseline times with median ``ratio`` x the variant's median (so the true speedup is ``ratio``)."""
    return rng.lognormal(math.log(ratio), sigma, n), rng.lognormal(0.0, sigma, n)


@pytest.mark.parametrize("n", [15, 40])
def test_speedup_ci_covers_the_true_ratio_about_95_percent_of_draws(n: int) -> None:
    rng = np.random.default_rng(20240501 + n)
    covered = 0
    for _ in range(DRAWS):
        base, variant = lognormal_pair(rng, n, TRUE_RATIO)
        _, low, high = ratio_ci(base, variant)
        covered += int(low <= TRUE_RATIO <= high)
    rate = covered / DRAWS
    assert 0.90 <= rate <= 0.99, rate


def test_identical_distributions_are_no_significant_difference_about_95_percent() -> None:
    rng = np.random.default_rng(7)
    verdicts = [compare_pair(*lognormal_pair(rng, 30, 1.0))[4] for _ in range(DRAWS)]
    same = verdicts.count("no significant difference") / DRAWS
    assert same >= 0.90, same
    assert set(verdicts) <= {"no significant difference", "faster", "slower"}


def test_a_real_difference_is_found_with_its_direction() -> None:
    rng = np.random.default_rng(3)
    base, variant = lognormal_pair(rng, 40, 2.0, sigma=0.1)
    s, low, high, p, verdict = compare_pair(base, variant)
    assert verdict == "faster" and p < 0.05 and low < s < high and low > 1.0
    s, low, high, p, verdict = compare_pair(variant, base)
    assert verdict == "slower" and high < 1.0
    assert compare_pair([1.0, 1.1], [2.0, 2.1])[4] == "too few samples"  # exact MWU cannot reach 0.05
    assert all(math.isnan(x) for x in ratio_ci([1.0], [1.0, 2.0]))


def _frame(points: list[dict[str, Any]], metric: str = "time", stage: str = "level0") -> pd.DataFrame:
    rows = []
    for i, params in enumerate(points):
        rows.append({"stage": stage, "point_id": f"p{i}", "metric": metric, "value": float(params.pop("t")),
                     "ci_low": math.nan, "ci_high": math.nan, "unit": "s", "kind": "timing", "status": "ok",
                     "text": None, "error": None, "env_hash": "e", **params})
    return pd.DataFrame(rows)


def test_only_points_differing_in_exactly_the_factor_are_paired() -> None:
    df = _frame([
        {"operators.impl": "eager", "operators.layout": "contiguous", "operators.size": 64, "t": 2.0},
        {"operators.impl": "compile", "operators.layout": "contiguous", "operators.size": 64, "t": 1.0},
        {"operators.impl": "eager", "operators.layout": "transposed", "operators.size": 64, "t": 3.0},
        {"operators.impl": "compile", "operators.layout": "contiguous", "operators.size": 128, "t": 1.0},
        {"operators.impl": "channels_last", "operators.layout": "channels_last", "operators.size": 64, "t": 1.0},
    ])
    rng = np.random.default_rng(0)
    samples = {f"p{i}": list(rng.lognormal(math.log(t), 0.05, 20)) for i, t in enumerate([2.0, 1.0, 3.0, 1.0, 1.0])}
    out = comparisons(df, lambda s, p, m: samples[p], {})
    assert list(zip(out["baseline_point"], out["variant_point"])) == [("p0", "p1")]
    row = out.iloc[0]
    assert (row["baseline"], row["variant"], row["factor"], row["metric"]) == ("eager", "compile", "operators.impl", "time")
    assert row["context"] == "operators.layout=contiguous, operators.size=64"
    assert row["verdict"] == "faster" and row["ci_low"] < 2.0 < row["ci_high"]


def test_baselines_and_alpha_from_config() -> None:
    l2 = next(f for f in FACTORS if f.stage == "level2")
    l3 = next(f for f in FACTORS if f.stage == "level3")
    sweep = {"sweep": {"grid": {"train.optimizer": ["adam", "sgd"]}}}
    assert baseline_of(l2, ["adam", "sgd"], sweep) == "adam"  # the first value of the sweep
    assert baseline_of(l2, ["adam", "sgd"], {}) == "sgd"      # else sgd
    assert baseline_of(l3, ["horovod", "mpi"], {}) is None    # declared ddp absent: no pairs
    assert alpha_of({"report": {"alpha": 0.01}}) == 0.01 and alpha_of({}) == 0.05


def test_without_samples_the_ci_comes_from_the_recorded_cis() -> None:
    df = _frame([{"distributed.backend": "ddp", "distributed.ranks": 2, "t": 2.0},
                 {"distributed.backend": "mpi", "distributed.ranks": 2, "t": 1.0}],
                metric="time_per_step_s", stage="level3")
    df["ci_low"] = df["value"] * 0.9
    df["ci_high"] = df["value"] * 1.1
    out = comparisons(df, None, {})
    [row] = out.to_dict(orient="records")
    assert row["speedup"] == pytest.approx(2.0)
    assert row["ci_low"] == pytest.approx(1.8 / 1.1) and row["ci_high"] == pytest.approx(2.2 / 0.9)
    assert row["verdict"] == "faster" and math.isnan(row["p_value"]) and "no raw samples" in row["method"]
