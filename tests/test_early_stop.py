"""Early stopping at level 2 (issue 56 item 4): ``train.early_stop`` stops at the target accuracy or
on a plateau of the test loss, says why in the record, and ``epochs_run`` counts what ran."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from d5pipe.levels.level2.early_stop import EarlyStop
from tests.conftest import TEST_CONF, d5pipe


def test_target_plateau_either_and_off() -> None:
    target = EarlyStop("target", 0.8)
    assert not target.after_epoch(1, 1.0, 0.79) and target.after_epoch(2, 1.1, 0.8)
    assert target.reason.startswith("target: test accuracy 0.8000") and "after epoch 2" in target.reason
    plateau = EarlyStop("plateau", None, patience=2, min_delta=0.01)
    losses = [1.0, 0.9, 0.895, 0.899]  # epoch 3 improves by less than min_delta: no improvement
    stops = [plateau.after_epoch(e, loss, 0.1) for e, loss in enumerate(losses, start=1)]
    assert stops == [False, False, False, True] and "best 0.9 after epoch 2" in plateau.reason
    assert plateau.record(4, 10) == {"by": "early_stop", "reason": plateau.reason, "epochs_run": 4, "epochs": 10}
    either = EarlyStop("either", 0.5, patience=1)
    assert either.after_epoch(1, 1.0, 0.2) is False and either.after_epoch(2, 2.0, 0.3) is True
    assert either.reason.startswith("plateau")
    off = EarlyStop("off", 0.1, patience=1)
    assert not any(off.after_epoch(e, 5.0, 1.0) for e in range(1, 6))
    assert off.record(5, 5)["by"] == "epochs"


def test_a_target_stop_without_a_target_is_one_line_at_plan() -> None:
    r = d5pipe("plan", "profiled_train", "--config-dir", str(TEST_CONF), "train.early_stop=target",
               "train.target_accuracy=null")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "train.early_stop" in r.stderr


@pytest.mark.slow
def test_training_stops_at_the_target_and_says_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "profiled_train", "--config-dir", str(TEST_CONF), "--out", str(run), "profile.enabled=false",
               "train.early_stop=target", "train.target_accuracy=0.3", "train.epochs=6")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = pd.read_parquet(run / "results.parquet").set_index("metric")
    assert res.loc["epochs_run", "value"] == 1 and res.loc["epochs_to_target", "value"] == 1
    assert res.loc["time_to_target_s", "value"] == pytest.approx(res.loc["train_time_s", "value"])
    record = json.loads(next((run / "points" / "level2").glob("*.json")).read_text())
    stopped = record["extra"]["stopped"]
    assert stopped["by"] == "early_stop" and stopped["epochs"] == 6 and "target_accuracy=0.3" in stopped["reason"]
    assert len(record["extra"]["curves"]["test_accuracy"]) == 1
