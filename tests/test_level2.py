"""d5pipe.levels.level2.point: real training on digits; determinism of the weight checksum, curves, step log."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels.contract import PointContext
from d5pipe.levels.datasets import dataset_key
from d5pipe.levels.level2.point import run_point

MLP = {"name": "mlp", "hidden": [32]}


def make_ctx(tmp_path: Path, train: dict[str, Any], seed: int = 11, model: dict[str, Any] | None = None,
             work: str = "work") -> PointContext:
    cfg = {"name": "t", "seed": 0, "model": model or MLP, "dataset": {"name": "digits"},
           "train": {"epochs": 2, "batch_size": 64, "lr": 0.01, **train}, "timer": {}}
    return PointContext("t", "level2", "p1", {}, cfg, seed, tmp_path, tmp_path / work,
                        tmp_path / "data", {})


def metric(out: Any, name: str) -> Any:
    return next(m for m in out.metrics if m.name == name)


def test_same_point_twice_gives_identical_weights_and_other_seed_differs(tmp_path: Path) -> None:
    cnn = {"name": "cnn", "channels": 4, "blocks": 1}
    a = run_point(make_ctx(tmp_path, {"epochs": 1}, model=cnn, work="a"))
    b = run_point(make_ctx(tmp_path, {"epochs": 1}, model=cnn, work="b"))
    c = run_point(make_ctx(tmp_path, {"epochs": 1}, model=cnn, seed=12, work="c"))
    wa, wb, wc = (metric(o, "weights_sha256") for o in (a, b, c))
    assert wa.kind == "deterministic" and len(wa.value) == 64
    assert wa.value == wb.value
    assert wc.value != wa.value
    assert a.extra["curves"]["train_loss"] == b.extra["curves"]["train_loss"]
    assert a.extra["determinism"]["use_deterministic_algorithms"] is True
    assert torch.are_deterministic_algorithms_enabled() is False  # restored after the point


def test_curves_metrics_and_step_log(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, {"epochs": 3, "optimizer": "adam", "target_accuracy": 0.5})
    assert not (ctx.data_dir / f"{dataset_key({'name': 'digits'})}.npz").exists()
    out = run_point(ctx)
    assert (ctx.data_dir / f"{dataset_key({'name': 'digits'})}.npz").is_file()
    curves = out.extra["curves"]
    assert curves["epoch"] == [1, 2, 3]
    for key in ("train_loss", "test_accuracy", "test_loss", "lr", "samples_per_s"):
        assert len(curves[key]) == 3
    assert curves["train_loss"][-1] < curves["train_loss"][0]
    acc = metric(out, "test_accuracy").value
    assert acc == curves["test_accuracy"][-1] and acc > 0.8
    ttt = metric(out, "time_to_target_s")
    assert 0 < ttt.value <= metric(out, "train_time_s").value
    steps = metric(out, "train_steps").value
    assert steps == 3 * math.ceil(out.extra["dataset"]["n_train"] / 64)
    events = [json.loads(line) for line in (ctx.work_dir / "steps.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(steps))
    assert sum(e["event"] == "epoch" for e in events) == 3
    assert events[-1]["weights_sha256"] == metric(out, "weights_sha256").value
    assert len(out.samples["step_time_s"]) == steps
    assert metric(out, "samples_per_s").value == pytest.approx(
        sum(curves["samples_per_s"][i] * curves["epoch_train_time_s"][i] for i in range(3))
        / sum(curves["epoch_train_time_s"]))


def test_worker_processes_do_not_change_the_batches(tmp_path: Path) -> None:
    runs = []
    for workers in (0, 2):  # a sweep over train.num_workers: the variants share their training seed
        ctx = make_ctx(tmp_path, {"epochs": 1, "num_workers": workers}, work=f"w{workers}", seed=11 + workers)
        ctx.params["train.num_workers"] = workers
        runs.append(run_point(ctx))
    assert metric(runs[0], "weights_sha256").value == metric(runs[1], "weights_sha256").value


def test_target_never_reached_is_nan_with_a_note(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"epochs": 1, "target_accuracy": 1.0, "lr": 1e-5}))
    assert math.isnan(metric(out, "time_to_target_s").value)
    assert any("never reached" in n for n in out.extra["notes"])


@pytest.mark.parametrize(("optimizer", "schedule", "expected_lr"), [
    ("sgd", "step", [0.01, 0.01, 0.001]),
    ("adamw", "cosine", [0.01, 0.0075, 0.0025]),
])
def test_optimizers_and_schedules(tmp_path: Path, optimizer: str, schedule: str,
                                  expected_lr: list[float]) -> None:
    out = run_point(make_ctx(tmp_path, {"epochs": 3, "optimizer": optimizer, "schedule": schedule,
                                        "step_epochs": 2, "weight_decay": 0.01}))
    assert out.extra["curves"]["lr"] == pytest.approx(expected_lr)


def test_bad_train_config_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="train.optimizer"):
        run_point(make_ctx(tmp_path, {"optimizer": "lbfgs"}))
    with pytest.raises(D5PipeError, match="train.schedule"):
        run_point(make_ctx(tmp_path, {"schedule": "linear"}))


def test_flops_per_sample_of_a_training_step_and_pct_of_peak(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"epochs": 1}))
    # Linear(64, 32) -> ReLU -> Linear(32, 10): forward, both weight gradients, one input gradient
    forward = 2 * (64 * 32 + 32 * 10)
    assert metric(out, "flops_per_sample").value == forward + 2 * 64 * 32 + 2 * (2 * 32 * 10)
    g = metric(out, "gflops")
    assert g.value == pytest.approx(metric(out, "samples_per_s").value * metric(out, "flops_per_sample").value / 1e9)
    assert metric(out, "pct_peak_flops").value == pytest.approx(100 * g.value / metric(out, "peak_gflops").value)
