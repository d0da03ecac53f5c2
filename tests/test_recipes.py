"""d5pipe.config.recipes: FIXED keys and acceptance thresholds on the tidy results frame."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from d5pipe import D5PipeError
from d5pipe.config.recipes import check_fixed
from d5pipe.results.acceptance import evaluate_acceptance


def test_fixed_key_varied_by_the_sweep_is_rejected() -> None:
    with pytest.raises(D5PipeError, match=r"^recipe.fixed: sweep varies fixed key 'train.epochs'$"):
        check_fixed(["train.epochs"], ["model.name", "train.epochs"])
    with pytest.raises(D5PipeError, match="fixed key 'train' \\(via axis 'train.lr'\\)"):
        check_fixed(["train"], ["train.lr"])
    with pytest.raises(D5PipeError, match="fixed key 'dataset.name'"):
        check_fixed(["dataset.name"], ["dataset"])
    check_fixed(["train.epochs", "dataset"], ["train.epochs_extra", "model.name", "train.lr"])


def frame() -> pd.DataFrame:
    rows = []
    points = (("a", 0.95, 0.2, "ok"), ("b", 0.85, 0.6, "ok"), ("c", None, None, "failed"))
    for pid, acc, loss, status in points:
        base = {"experiment": "e", "stage": "level2", "point_id": pid, "unit": "", "kind": "numerical",
                "text": None, "status": status, "error": None if status == "ok" else "boom",
                "seed": 1, "env_hash": "h", "model.name": f"m{pid}"}
        if status == "ok":
            rows.append({**base, "metric": "test_accuracy", "value": acc})
            rows.append({**base, "metric": "test_loss", "value": loss})
        else:
            rows.append({**base, "metric": "status", "value": math.nan})
    rows.append({"experiment": "e", "stage": "level1", "point_id": "z", "metric": "test_accuracy",
                 "value": 0.1, "unit": "", "kind": "numerical", "text": None, "status": "ok",
                 "error": None, "seed": 1, "env_hash": "h", "model.name": "mz"})
    return pd.DataFrame(rows)


def verdicts(out: pd.DataFrame, metric: str) -> dict[str, str]:
    sub = out[out["metric"] == metric]
    return dict(zip(sub["point_id"], sub["text"], strict=True))


def test_acceptance_directions_and_failures() -> None:
    out = evaluate_acceptance(frame(), [
        {"metric": "test_accuracy", "op": ">=", "value": 0.9, "stage": "level2"},
        {"metric": "test_loss", "op": "<=", "value": 0.5, "stage": "level2"},
    ])
    assert verdicts(out, "acceptance:test_accuracy") == {"a": "pass", "b": "fail", "c": "fail"}
    assert verdicts(out, "acceptance:test_loss") == {"a": "pass", "b": "fail", "c": "fail"}
    assert len(out) == 6 and set(out["kind"]) == {"verdict"} and set(out["stage"]) == {"level2"}
    row = out[(out["point_id"] == "b") & (out["metric"] == "acceptance:test_accuracy")].iloc[0]
    assert row["value"] == pytest.approx(0.85) and row["model.name"] == "mb" and row["env_hash"] == "h"
    assert "failed" in out[out["point_id"] == "c"].iloc[0]["error"]
    # the <= direction passes the low value and fails the high one when the threshold moves
    rule = {"metric": "test_loss", "op": "<=", "value": 0.7, "stage": "level2"}
    out2 = evaluate_acceptance(frame(), [rule])
    assert verdicts(out2, "acceptance:test_loss") == {"a": "pass", "b": "pass", "c": "fail"}
    assert list(out2.columns)[: len(frame().columns)] == list(frame().columns)


def test_boundary_missing_metric_and_unknown_op() -> None:
    out = evaluate_acceptance(frame(), [{"metric": "test_accuracy", "op": ">=", "value": 0.95,
                                         "stage": "level2"}])
    assert verdicts(out, "acceptance:test_accuracy")["a"] == "pass"  # equality passes >=
    out = evaluate_acceptance(frame(), [{"metric": "f1", "op": ">=", "value": 0.5, "stage": "level2"}])
    assert set(out["text"]) == {"fail"} and "not recorded" in out.iloc[0]["error"]
    with pytest.raises(D5PipeError, match=r"recipe.acceptance\[0\].op: unknown operator '>'"):
        evaluate_acceptance(frame(), [{"metric": "test_accuracy", "op": ">", "value": 0.9}])
    with pytest.raises(D5PipeError, match=r"recipe.acceptance\[0\].stage: unknown stage 'level9'"):
        evaluate_acceptance(pd.DataFrame(), [{"metric": "x", "value": 1, "stage": "level9"}])
    assert evaluate_acceptance(frame().iloc[0:0], [{"metric": "x", "value": 1}]).empty
    assert evaluate_acceptance(pd.DataFrame(), [{"metric": "x", "value": 1}]).empty


def test_train_digits_experiment_composes_and_respects_its_recipe() -> None:
    from d5pipe.config.compose import compose_config, to_plain

    cfg = to_plain(compose_config("train_digits"))
    axes = list(cfg["sweep"]["grid"])
    assert axes == ["model.name", "train.optimizer", "train.batch_size"]
    check_fixed(cfg["recipe"]["fixed"], axes)
    assert cfg["recipe"]["acceptance"] == [{"metric": "test_accuracy", "op": ">=", "value": 0.9,
                                             "stage": "level2"}]
    with pytest.raises(D5PipeError, match="train.epochs"):
        check_fixed(cfg["recipe"]["fixed"], [*axes, "train.epochs"])
