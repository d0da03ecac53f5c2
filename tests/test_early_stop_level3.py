"""Early stopping at level 3 (issue 56 item 4): ``distributed.early_stop`` ends a distributed
training run on the workers' mean loss, every rank after the same step, says why, counts
``steps_run`` and compares the serial model over the same steps; a target stop without
``distributed.target_loss`` is refused before any job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.levels.contract import PointContext, run_closers
from d5pipe.levels.level3.early_stop import STEPS, from_spec, shared_mean_loss
from d5pipe.levels.level3.point import run_point
from d5pipe.levels.level3.validate import check_distributed
from d5pipe.measure import energy
from tests.conftest import d5pipe
from tests.test_energy import fake_powercap

STEPS_MAX, WARMUP = 12, 1
TARGET_LOSS = 2.0
"""As tests/test_strategies.py: above every loss at the first timed step, reached by allreduce at
lr 0.5 within 8 timed steps of digits."""


class _Gathered:
    """A backend whose allgather returns the posted rows of every rank (this one's among them)."""

    def __init__(self, rows: list[list[float]], rank: int) -> None:
        self.rows, self.rank = rows, rank

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        rows = [list(r) for r in self.rows]
        rows[self.rank] = t.tolist()
        return torch.tensor(rows, dtype=t.dtype).reshape(-1)


def test_the_decision_is_the_workers_mean_loss_servers_left_out() -> None:
    posted = [[1.0, 1.0], [3.0, 1.0], [0.0, 0.0]]  # two workers, one parameter server
    means = [shared_mean_loss(_Gathered(posted, r), *(posted[r][0], bool(posted[r][1]))) for r in range(3)]
    assert means == [2.0, 2.0, 2.0]  # type: ignore[arg-type]
    stop = from_spec({"early_stop": {"mode": "target", "target": 2.0, "patience": 3, "min_delta": 0.0}})
    assert stop.words == STEPS and not stop.after(1, 2.1, 2.1) and stop.after(2, 2.0, 2.0)  # a loss: from above
    assert stop.reason == "target: mean worker loss 2.0000 reached distributed.target_loss=2.0 after step 2"
    assert stop.record(2, 12) == {"by": "early_stop", "reason": stop.reason, "steps_run": 2, "steps": 12}
    plateau = from_spec({"early_stop": {"mode": "plateau", "target": None, "patience": 2, "min_delta": 0.0}})
    assert [plateau.after(n, v, v) for n, v in enumerate([2.0, 1.5, 1.6, 1.5], start=1)] == [False] * 3 + [True]
    assert "for 2 step(s) (best 1.5 after step 2)" in plateau.reason
    assert from_spec({}).record(5, 5) == {"by": "steps", "reason": "all 5 step(s) of distributed.steps ran",
                                          "steps_run": 5, "steps": 5}


def test_a_target_stop_without_target_loss_is_refused_before_any_job() -> None:
    dist = {"benchmark": "train", "ranks": 2, "global_batch": 32, "early_stop": "either"}
    with pytest.raises(D5PipeError, match=r"distributed.early_stop.*distributed.target_loss"):
        check_distributed(dist)
    check_distributed({**dist, "target_loss": 1.5})
    check_distributed({**dist, "early_stop": "plateau"})
    r = d5pipe("plan", "quickstart", "stages=[level3]", "distributed.early_stop=target")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "distributed.early_stop" in r.stderr and "target_loss" in r.stderr, r.stderr


def _ctx(tmp_path: Path, cache: dict[str, Any]) -> PointContext:
    dist = {"backend": "ddp", "ranks": 2, "global_batch": 32, "steps": STEPS_MAX, "warmup_steps": WARMUP,
            "timeout_s": 240.0, "threads_per_rank": 1, "target_loss": TARGET_LOSS, "early_stop": "target"}
    config = {"name": "early", "seed": 3, "distributed": dist, "model": {"name": "mlp", "hidden": [32], "dropout": 0.0},
              "dataset": {"name": "digits"}, "train": {"optimizer": "sgd", "lr": 0.5, "momentum": 0.9},
              "timer": {}}
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    return PointContext("early", "level3", "pt", {}, config, 21, tmp_path, work, data, {"name": "local"}, cache)


@pytest.mark.slow
@pytest.mark.mpi
def test_ranks_stop_together_at_the_target_loss_and_the_serial_model_trains_as_many_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also (one launch for both) energy per step at level 3 (tests/test_energy_training.py): the
    ranks read a fake powercap tree, whose counters stand still, and only local rank 0 reads it."""
    monkeypatch.setenv(energy.POWERCAP_ENV, str(fake_powercap(tmp_path / "powercap")))
    cache: dict[str, Any] = {}
    try:
        out = run_point(_ctx(tmp_path, cache))
    finally:
        run_closers(cache)
    m = {x.name: x.value for x in out.metrics}
    ran = m["steps_run"]
    assert isinstance(ran, int) and 1 < ran < STEPS_MAX, m
    assert m["steps_to_target_loss"] == ran  # it stopped at the first step that reached the target
    stopped = out.extra["stopped"]
    assert stopped["by"] == "early_stop" and stopped["steps_run"] == ran and stopped["steps"] == STEPS_MAX
    assert f"distributed.target_loss={TARGET_LOSS}" in stopped["reason"] and f"after step {ran}" in stopped["reason"]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "work" / "ranks").glob("rank*.json"))]
    assert len(ranks) == 2
    assert {(r["steps_run"], len(r["times_s"]), len(r["losses"])) for r in ranks} == {(ran, ran, WARMUP + ran)}
    assert m["matches_serial"] == "pass", m["serial_max_abs_diff"]  # the serial run trained WARMUP + ran steps
    assert len(out.samples["step_time_max_s"]) == ran
    assert [r["energy"] is not None for r in ranks] == [True, False]  # one host: its local rank 0 reads RAPL
    metered = out.extra["energy"]
    assert metered["available"] and metered["method"] == energy.RAPL_METHOD and metered["measured_by"] == [0]
    assert metered["per_rank"]["0"]["calls"] == ran and m["energy_per_step"] == 0.0 and m["power"] == 0.0
