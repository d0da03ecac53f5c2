"""Level-2 sanity checks without a reference (d5pipe.levels.level2.sanity): a training run with a
non-finite value, a rising loss or a final accuracy at chance fails its point with a named check,
and the side-by-side comparison never ranks a point that failed a check."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from d5pipe.core.outcome import Metric
from d5pipe.levels.contract import PointContext
from d5pipe.levels.level2.sanity import (
    CHANCE_MIN_STEPS,
    FAIL,
    NOT_JUDGED,
    PASS,
    chance_rule,
    divergence_rule,
    finite_rule,
    sanity_checks,
)
from d5pipe.results.comparisons import NOT_COMPARED, comparisons
from d5pipe.results.verdicts import point_verdicts
from tests.conftest import ROOT, TEST_CONF, d5pipe

CURVES = {"train_loss": [2.0, 1.0], "train_accuracy": [0.5, 0.8], "test_loss": [2.1, 1.1], "test_accuracy": [0.5, 0.8]}


def falling(n: int, start: float = 2.3, end: float = 0.3) -> list[float]:
    return [start + (end - start) * i / (n - 1) for i in range(n)]


# --- the rules ------------------------------------------------------------------------------------

def test_finite_rule_names_every_non_finite_value() -> None:
    assert finite_rule(falling(20), CURVES, {"macro_f1": 0.7}, True).verdict == PASS
    r = finite_rule([2.0, math.nan, 1.0, math.inf], CURVES, {}, True)
    assert r.verdict == FAIL and "step 1 (2 of 4 steps)" in r.detail
    r = finite_rule(falling(20), {**CURVES, "test_loss": [2.0, math.inf]}, {"macro_f1": math.nan}, False)
    assert r.verdict == FAIL
    assert "test_loss inf after epoch 2" in r.detail and "macro_f1 nan" in r.detail and "weights" in r.detail


def test_divergence_rule_fails_a_rising_loss_only() -> None:
    rising = divergence_rule(falling(200, 2.3, 6.0))
    assert rising.verdict == FAIL and rising.measured["ratio"] > 2 and "rose" in rising.detail
    assert rising.measured["window"] == 20 and rising.measured["loss_start"] < 2.5
    assert divergence_rule(falling(200)).verdict == PASS
    # flat and noisy (a tiny learning rate): within noise, not divergence
    flat = [2.3 + 0.2 * ((-1) ** i) for i in range(50)]
    assert divergence_rule(flat).verdict == PASS
    # one spiky batch at the end moves a median nowhere
    assert divergence_rule([*falling(60), 50.0]).verdict == PASS
    # tiny losses that double did not diverge (absolute margin)
    assert divergence_rule([1e-3] * 10 + [2e-3] * 10).verdict == PASS
    assert divergence_rule([2.0] * 5 + [9.0] * 4).verdict == NOT_JUDGED  # 9 steps: too few
    assert divergence_rule([2.0] * 10 + [math.nan]).verdict == NOT_JUDGED  # train_finite's case


def test_chance_rule_judges_only_a_run_that_trained_enough() -> None:
    n = CHANCE_MIN_STEPS
    r = chance_rule(0.033, 10, n)
    assert r.verdict == FAIL and "chance 1/10 = 0.1" in r.detail and r.measured["chance"] == 0.1
    assert chance_rule(0.1, 10, n).verdict == FAIL  # at chance fails too
    assert chance_rule(0.11, 10, n).verdict == PASS
    assert chance_rule(0.033, 10, n - 1).verdict == NOT_JUDGED
    assert chance_rule(math.nan, 10, n).verdict == NOT_JUDGED
    assert chance_rule(0.0, 1, n).verdict == NOT_JUDGED


def test_only_failing_rules_give_rows_and_every_rule_is_recorded() -> None:
    rows, extra = sanity_checks(falling(150, 2.3, 7.0), {**CURVES, "test_accuracy": [0.2, 0.03]}, {}, True, 10)
    assert [m.name for m in rows] == ["sanity:not_diverged", "sanity:above_chance"]
    assert all(m.value == "fail" and m.kind == "verdict" and m.detail for m in rows)
    assert rows[0].to_dict()["detail"] == rows[0].detail
    assert {k: v["verdict"] for k, v in extra.items()} == {
        "train_finite": "pass", "not_diverged": "fail", "above_chance": "fail"}
    assert extra["above_chance"]["test_accuracy"] == 0.03 and extra["not_diverged"]["steps"] == 150
    rows, extra = sanity_checks(falling(150), CURVES, {}, True, 10)
    assert rows == [] and all(v["verdict"] == "pass" for v in extra.values())
    assert "detail" not in Metric("x", 1.0).to_dict()  # other metrics' records unchanged


def test_a_normal_short_training_run_passes(tmp_path: Path) -> None:
    from d5pipe.levels.level2.point import run_point

    cfg = {"name": "t", "seed": 0, "model": {"name": "mlp", "hidden": [16]}, "dataset": {"name": "digits"},
           "train": {"epochs": 3, "batch_size": 32, "lr": 1e-3, "peak": False, "target_accuracy": None}}
    out = run_point(PointContext("t", "level2", "p1", {}, cfg, 11, tmp_path, tmp_path / "w", tmp_path / "data", {}))
    sanity = out.extra["sanity"]
    assert not [m for m in out.metrics if m.name.startswith("sanity:")], sanity
    assert {k: v["verdict"] for k, v in sanity.items()} == {k: "pass" for k in sanity}  # all three judged
    assert sanity["not_diverged"]["ratio"] < 1.0 and sanity["above_chance"]["steps"] >= CHANCE_MIN_STEPS


# --- verdicts and the side-by-side comparison ------------------------------------------------------

def _frame(fail_variant: bool) -> pd.DataFrame:
    """Adam and a Lion, three repetitions each (axis repeat); the Lion's third repetition optionally
    fails its sanity check."""
    rows: list[dict[str, Any]] = []
    for rep in range(3):
        for pid, opt, t, acc in (("a", "adam", 2.0, 0.95), ("l", "lion", 1.0, 0.03)):
            point = f"{pid}{rep}"
            base = {"stage": "level2", "point_id": point, "status": "ok", "error": None, "ci_low": math.nan,
                    "ci_high": math.nan, "train.optimizer": opt, "repeat": rep}
            rows += [{**base, "metric": "step_time", "value": t * (1 + 0.01 * rep), "text": None, "unit": "s",
                      "kind": "timing"},
                     {**base, "metric": "test_accuracy", "value": acc, "text": None, "unit": "", "kind": "numerical"}]
            if point == "l2" and fail_variant:
                rows.append({**base, "metric": "sanity:not_diverged", "value": math.nan, "text": "fail", "unit": "",
                             "kind": "verdict", "error": "training loss rose: 6.1 vs 2.3"})
    return pd.DataFrame(rows)


def test_a_failed_check_is_the_reason_and_the_pair_is_not_ranked() -> None:
    config = {"sweep": {"grid": {"train.optimizer": ["adam", "lion"]}}}
    ranked = comparisons(_frame(False), None, config).iloc[0]
    assert ranked["verdict"] == "faster" and ranked["speedup"] == pytest.approx(2.0, rel=0.05)
    assert (ranked["baseline_quality"], ranked["variant_quality"]) == pytest.approx((0.95, 0.03))

    df = _frame(True)
    [reason] = point_verdicts(df).set_index("point_id").loc[["l2"], "reason"]
    assert reason == "check sanity:not_diverged failed (training loss rose: 6.1 vs 2.3)"
    pair = comparisons(df, None, config).iloc[0]  # one failed repetition: the side is not ranked
    assert pair["verdict"] == NOT_COMPARED and math.isnan(pair["speedup"]) and math.isnan(pair["p_value"])
    assert pair["note"] == f"variant failed: {reason}" and pair["variant_verdict"] == "fail"
    assert pair["variant_median"] == pytest.approx(1.01, rel=0.01) and pair["variant_quality"] == pytest.approx(0.03)


# --- a real user optimizer with a flipped sign, through the CLI -------------------------------------

@pytest.mark.slow
def test_flipped_sign_optimizer_fails_its_point_and_is_not_ranked(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.results.run_results import build_results
    from d5pipe.rundir.layout import RunDir

    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "plugin_fixtures"))
    monkeypatch.delenv("D5PIPE_ALLOW", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    run = tmp_path / "run"
    r = d5pipe("run", "sanity_flipped", "--config-dir", str(TEST_CONF), "--allow", "byo_wrong", "--out", str(run))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "1 of 2 points did not pass (1 failed checks)" in r.stdout.strip().splitlines()[-1]

    df = pd.read_parquet(run / "results.parquet")
    verdicts = point_verdicts(df).merge(df.drop_duplicates("point_id")[["point_id", "train.optimizer"]])
    by_opt = {str(v.train_optimizer): v for v in verdicts.rename(columns={"train.optimizer": "train_optimizer"})
              .itertuples(index=False)}
    lion, adam = by_opt["lion_flipped"], by_opt["adam"]
    assert adam.verdict != "fail", adam.reason
    assert lion.verdict == "fail" and lion.reason.startswith("check sanity:not_diverged failed (training loss rose")
    failed = set(df.loc[(df["point_id"] == lion.point_id) & (df["text"] == "fail"), "metric"])
    assert failed == {"sanity:not_diverged", "sanity:above_chance"}

    status = d5pipe("status", str(run))
    assert status.returncode == 3 and f"fail level2/{lion.point_id}: check sanity:not_diverged failed" in status.stdout

    [pair] = comparisons(df, build_results(run).samples, RunDir(run).config).to_dict(orient="records")
    assert (pair["baseline"], pair["variant"], pair["verdict"]) == ("adam", "lion_flipped", NOT_COMPARED)
    assert math.isnan(pair["speedup"]) and "sanity:not_diverged" in pair["note"]
    assert pair["baseline_quality"] > 0.5 and pair["variant_quality"] <= 0.1
    html = (run / "report.html").read_text(encoding="utf-8")
    side = html[html.index('id="compare-level2"'):html.index('id="table-level2"')]
    assert "not compared: variant failed: check sanity:not_diverged failed" in side
    assert "<td>faster</td>" not in side and "<td>slower</td>" not in side and "x [" not in side
