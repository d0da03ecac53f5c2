"""d5pipe.results.comparisons: the CI of the speedup covers the truth, the test keeps its level,
and only points that differ in exactly the compared factor are paired."""

from __future__ import annotations

import math
from pathlib import Path
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
    rng = np.random.default_rng(0)
    configs = [("eager", "contiguous", 64, 2.0), ("compile", "contiguous", 64, 1.0), ("eager", "transposed", 64, 3.0),
               ("compile", "contiguous", 128, 1.0), ("channels_last", "channels_last", 64, 1.0)]
    df = _frame([{"operators.impl": impl, "operators.layout": layout, "operators.size": size, "repeat": rep,
                  "t": float(t * rng.lognormal(0.0, 0.05))}
                 for rep in range(4) for impl, layout, size, t in configs])
    out = comparisons(df, None, {})
    assert list(zip(out["baseline_point"], out["variant_point"])) == [("p0", "p1")]  # first repetitions
    row = out.iloc[0]
    assert (row["baseline"], row["variant"], row["factor"], row["metric"]) == ("eager", "compile", "operators.impl", "time")
    assert row["context"] == "operators.layout=contiguous, operators.size=64"  # not the repetition
    assert row["n_baseline"] == row["n_variant"] == 4
    assert row["verdict"] == "faster" and row["ci_low"] < 2.0 < row["ci_high"] and row["ci_low"] > 1.0
    assert "Welch" in row["method"]


def test_one_process_per_side_is_not_compared() -> None:
    """Without repetitions the samples of one process cannot tell a variant from noise: the
    speedup of the two medians is shown, with no CI, test or verdict."""
    df = _frame([{"distributed.backend": "ddp", "distributed.ranks": 2, "t": 2.0},
                 {"distributed.backend": "mpi", "distributed.ranks": 2, "t": 1.0}],
                metric="time_per_step_s", stage="level3")
    [row] = comparisons(df, None, {}).to_dict(orient="records")
    assert row["speedup"] == pytest.approx(2.0) and math.isnan(row["ci_low"]) and math.isnan(row["p_value"])
    assert row["verdict"] == "not compared" and "one process per side" in row["method"]


def test_the_verdict_rule_is_the_ci_and_the_test_together() -> None:
    """faster/slower only when the CI of the speedup excludes 1 and p < alpha; else no significant
    difference (never "1.01x [0.94, 1.08], p = 0.03, faster")."""
    rng = np.random.default_rng(5)
    for _ in range(60):
        ratio = float(rng.choice([1.0, 1.05, 1.5]))
        df = _frame([{"operators.impl": impl, "repeat": rep, "t": float(t * rng.lognormal(0.0, 0.1))}
                     for rep in range(3) for impl, t in (("eager", ratio), ("compile", 1.0))])
        [row] = comparisons(df, None, {}).to_dict(orient="records")
        excludes = row["ci_low"] > 1 or row["ci_high"] < 1
        significant = excludes and row["p_value"] < 0.05
        assert row["verdict"] == (("faster" if row["speedup"] > 1 else "slower") if significant
                                  else "no significant difference")
        assert row["ci_low"] <= row["speedup"] <= row["ci_high"]


def test_baselines_and_alpha_from_config() -> None:
    l2 = next(f for f in FACTORS if f.stage == "level2")
    l3 = next(f for f in FACTORS if f.stage == "level3")
    sweep = {"sweep": {"grid": {"train.optimizer": ["adam", "sgd"]}}}
    assert baseline_of(l2, ["adam", "sgd"], sweep) == "adam"  # the first value of the sweep
    assert baseline_of(l2, ["adam", "sgd"], {}) == "sgd"      # else sgd
    assert baseline_of(l3, ["horovod", "mpi"], {}) is None    # declared ddp absent: no pairs
    assert alpha_of({"report": {"alpha": 0.01}}) == 0.01 and alpha_of({}) == 0.05




def test_a_variant_verified_against_its_own_reference_is_still_compared() -> None:
    """A user optimizer zipped with its own reference (train.reference_optimizer): the reference is a
    property of that variant, so the optimizers still pair with the baseline."""
    rng = np.random.default_rng(2)
    rows = [{"train.optimizer": opt, "train.reference_optimizer": ref, "repeat": rep,
             "t": float(t * rng.lognormal(0.0, 0.02))}
            for rep in range(3) for opt, ref, t in (("sgd", "", 2.0), ("adam", "", 2.0), ("my_lion", "lion_ref", 1.0))]
    out = comparisons(_frame(rows, metric="step_time", stage="level2"), None,
                      {"sweep": {"zip": [{"train.optimizer": ["sgd", "adam", "my_lion"],
                                          "train.reference_optimizer": ["", "", "lion_ref"]}]}})
    assert sorted(out["variant"]) == ["adam", "my_lion"] and set(out["baseline"]) == {"sgd"}
    assert out.set_index("variant").loc["my_lion", "verdict"] == "faster"


@pytest.mark.slow
def test_verify_and_compare_in_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run: my_sgd is checked against its reference (optimizer_check passes) and, in the same
    run, the side-by-side pairs it and adam with sgd across their three repetitions."""
    from tests.conftest import ROOT, TEST_CONF, d5pipe

    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "plugin_fixtures"))
    monkeypatch.delenv("D5PIPE_ALLOW", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    run = tmp_path / "run"
    r = d5pipe("run", "verify_compare", "--config-dir", str(TEST_CONF), "--allow", "byo_wrong", "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    checks = df[df["metric"] == "optimizer_check"]
    assert set(checks["train.optimizer"]) == {"my_sgd"} and set(checks["text"]) == {"pass"} and len(checks) == 3
    from d5pipe.results.run_results import build_results
    from d5pipe.rundir.layout import RunDir

    out = comparisons(df, build_results(run).samples, RunDir(run).config)
    assert sorted(out["variant"]) == ["adam", "my_sgd"] and set(out["baseline"]) == {"sgd"}
    assert (out["n_baseline"] == 3).all() and (out["n_variant"] == 3).all()
    assert set(out["verdict"]) <= {"faster", "slower", "no significant difference"}
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "my_sgd vs sgd" in html and "No fair pair" not in html
