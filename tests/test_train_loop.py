"""d5pipe.levels.level2.train_loop: the epoch's bookkeeping, step log and step clock on a real model and data."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from d5pipe.levels.level2.train_loop import StepClock, StepLog, evaluate, make_loader, train_epoch


def _data(n: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long()
    return x, y


def test_epoch_loss_is_the_weighted_mean_of_the_logged_step_losses(tmp_path: Path) -> None:
    x, y = _data(200)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader(x, y, batch_size=64, seed=3)
    with StepLog(tmp_path / "steps.jsonl") as log:
        stats = train_epoch(model, loader, opt, torch.device("cpu"), epoch=1, log=log, first_step=5)
    events = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events] == [5, 6, 7, 8]
    assert [e["batch"] for e in events] == [64, 64, 64, 8]
    assert stats.samples == 200
    assert len(stats.step_times_s) == 4 and all(t > 0 for t in stats.step_times_s)
    assert [e["step_time_s"] for e in events] == stats.step_times_s
    assert stats.train_time_s >= sum(stats.step_times_s)
    weighted = sum(e["loss"] * e["batch"] for e in events) / 200
    assert stats.train_loss == pytest.approx(weighted, rel=1e-12)


def test_evaluate_matches_a_whole_split_computation() -> None:
    x, y = _data(130)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 2))
    loss, acc = evaluate(model, x, y, 50, torch.device("cpu"))
    with torch.no_grad():
        out = model(x)
    assert loss == pytest.approx(float(nn.functional.cross_entropy(out, y)), rel=1e-6)
    assert acc == (out.argmax(dim=1) == y).sum().item() / 130
    assert not model.training


def test_log_every_keeps_global_step_numbers() -> None:
    log = StepLog(None)
    log._fh = io.StringIO()
    log.write_steps(2, 10, 0.5, [1.0, 2.0, 3.0, 4.0], [4, 4, 4, 4], [0.1, 0.2, 0.3, 0.4], every=3)
    lines = [json.loads(line) for line in log._fh.getvalue().splitlines()]
    assert [e["step"] for e in lines] == [12]
    assert lines[0] == {"batch": 4, "epoch": 2, "event": "step", "loss": 3.0, "lr": 0.5,
                        "step": 12, "step_time_s": 0.3}


def test_step_lines_are_json_for_non_finite_losses() -> None:
    log = StepLog(None)
    log._fh = io.StringIO()
    log.write_steps(1, 0, 1e-3, [math.nan, math.inf, 1e-30], [1, 1, 1], [1e-6, 2e-6, 3e-6])
    lines = [json.loads(line) for line in log._fh.getvalue().splitlines()]
    assert math.isnan(lines[0]["loss"]) and lines[1]["loss"] == math.inf and lines[2]["loss"] == 1e-30


def test_batches_are_the_same_with_workers_and_in_process() -> None:
    x, y = _data(50)
    a = [yb.tolist() for _, yb in make_loader(x, y, 16, seed=9)]
    b = [yb.tolist() for _, yb in make_loader(x, y, 16, seed=9, num_workers=1)]
    assert a == b and sum(map(len, a)) == 50
    c = [yb.tolist() for _, yb in make_loader(x, y, 16, seed=10)]
    assert c != a


def test_cpu_step_clock_pairs_marks() -> None:
    clock = StepClock(torch.device("cpu"))
    for _ in range(3):
        clock.mark()
        sum(range(1000))
        clock.mark()
    seconds = clock.seconds()
    assert len(seconds) == 3 and all(s > 0 for s in seconds)


def test_an_epochs_len_counts_its_batches_and_the_workers_dataset_its_samples() -> None:
    """``len()`` says what it counts (#57 item 8): the in-process loader's (GatheredBatches) is the
    batches of an epoch, the index-batch Dataset's (BatchByIndices) the samples its indices address."""
    from d5pipe.levels.level2.train_loop import BatchByIndices, GatheredBatches

    x, y = torch.randn(10, 3), torch.arange(10)
    loader = make_loader(x, y, batch_size=4, seed=0)
    assert isinstance(loader, GatheredBatches)
    assert len(loader) == len(list(loader)) == 3  # 4 + 4 + 2 samples
    assert len(BatchByIndices(x, y)) == 10
