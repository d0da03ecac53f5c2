"""d5pipe.results.comparisons: only points that differ in exactly the compared factor are paired;
each pair is decided by the one comparison model (faster, slower, equivalent, inconclusive)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from d5pipe.results.comparisons import FACTORS, alpha_of, baseline_of, comparisons, policy_of


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
    assert "Welch" in row["method"] and "Holm" in row["method"]


def test_one_process_per_side_is_not_compared() -> None:
    """Without repetitions the samples of one process cannot tell a variant from noise: the
    speedup of the two medians is shown, with no CI, test or verdict."""
    df = _frame([{"distributed.backend": "ddp", "distributed.ranks": 2, "t": 2.0},
                 {"distributed.backend": "mpi", "distributed.ranks": 2, "t": 1.0}],
                metric="time_per_step_s", stage="level3")
    [row] = comparisons(df, None, {}).to_dict(orient="records")
    assert row["speedup"] == pytest.approx(2.0) and math.isnan(row["ci_low"]) and math.isnan(row["p_value"])
    assert row["verdict"] == "not compared" and "one process per side" in row["method"]


def test_the_verdicts_of_a_pair() -> None:
    """faster/slower only when the CI of the speedup excludes 1 and the family's test agrees;
    equivalent when the whole CI is within the margin; otherwise inconclusive, with the
    repetitions that would decide it (never "1.01x [0.94, 1.08], faster")."""
    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(60):
        ratio = float(rng.choice([1.0, 1.05, 1.5]))
        noise = float(rng.choice([0.01, 0.2]))
        df = _frame([{"operators.impl": impl, "repeat": rep, "t": float(t * rng.lognormal(0.0, noise))}
                     for rep in range(4) for impl, t in (("eager", ratio), ("compile", 1.0))])
        [row] = comparisons(df, None, {}).to_dict(orient="records")
        excludes = row["ci_low"] > 1 or row["ci_high"] < 1
        within = row["ci_low"] >= 1 / 1.1 and row["ci_high"] <= 1.1
        assert row["ci_low"] <= row["speedup"] <= row["ci_high"]
        if row["verdict"] in ("faster", "slower"):
            assert excludes and (row["verdict"] == "faster") == (row["speedup"] > 1)
        elif row["verdict"] == "equivalent":
            assert within
        else:
            assert row["verdict"] == "inconclusive" and not within and row["needed"] > 4
        seen.add(row["verdict"])
    assert seen == {"faster", "equivalent", "inconclusive"}


def test_baselines_and_alpha_from_config() -> None:
    l2 = next(f for s, f in FACTORS if s == "level2")
    l3 = next(f for s, f in FACTORS if s == "level3")
    sweep = {"sweep": {"grid": {"train.optimizer": ["adam", "sgd"]}}}
    assert baseline_of(l2, ["adam", "sgd"], sweep) == "adam"  # the first value of the sweep
    assert baseline_of(l2, ["adam", "sgd"], {}) == "sgd"      # else sgd
    assert baseline_of(l3, ["horovod", "mpi"], {}) is None    # declared ddp absent: no pairs
    assert alpha_of({"report": {"alpha": 0.01}}) == 0.01 and alpha_of({}) == 0.05
    assert policy_of({"report": {"margin": 0.05}}).margin == 0.05 and policy_of({}).margin == 0.10




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
    assert set(out["verdict"]) <= {"faster", "slower", "equivalent", "inconclusive"}
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "my_sgd vs sgd" in html and "No fair pair" not in html


def test_micro_batches_pair_by_their_number_with_the_memory_on_both_sides() -> None:
    """A numeric factor (train.micro_batches) reads as "1" and "4" though results.parquet holds it as a
    float column (NaN at other stages); each side shows its step's peak memory (the quality)."""
    rng = np.random.default_rng(4)
    rows = [{"train.micro_batches": float(k), "repeat": rep, "t": float(t * rng.lognormal(0.0, 0.02))}
            for rep in range(4) for k, t in ((1, 1.0), (4, 1.3))]
    df = _frame(rows, metric="step_time", stage="level2")
    memory = df.assign(metric="step_peak_memory", unit="B", kind="numerical",
                       value=[4e6 if k == 1 else 1e6 for k in df["train.micro_batches"]])
    other = _frame([{"operators.impl": "eager", "t": 1.0}])  # another stage: NaN micro_batches
    out = comparisons(pd.concat([df, memory, other], ignore_index=True), None, {})
    [row] = out[out["factor"] == "train.micro_batches"].to_dict(orient="records")
    assert (row["baseline"], row["variant"], row["verdict"]) == ("1", "4", "slower")
    assert (row["quality_metric"], row["baseline_quality"], row["variant_quality"]) == ("step_peak_memory", 4e6, 1e6)


def test_strategies_pair_with_allreduce_and_show_what_their_loss_became() -> None:
    """Level 3's strategies against the synchronous allreduce, at the same backend and ranks: time
    per step decided, and each side's final loss shown (what the communication saved cost)."""
    rng = np.random.default_rng(6)
    rows = [{"distributed.strategy": s, "distributed.backend": "ddp", "distributed.ranks": 2, "repeat": rep,
             "t": float(t * rng.lognormal(0.0, 0.02))}
            for rep in range(4) for s, t in (("allreduce", 1.0), ("local_sgd", 0.5))]
    df = _frame(rows, metric="time_per_step_s", stage="level3")
    loss = df.assign(metric="final_loss", unit="", kind="numerical",
                     value=[0.3 if s == "allreduce" else 0.4 for s in df["distributed.strategy"]])
    out = comparisons(pd.concat([df, loss], ignore_index=True), None, {})
    [row] = out[out["factor"] == "distributed.strategy"].to_dict(orient="records")
    assert (row["baseline"], row["variant"], row["verdict"]) == ("allreduce", "local_sgd", "faster")
    assert (row["baseline_quality"], row["variant_quality"]) == (pytest.approx(0.3), pytest.approx(0.4))
