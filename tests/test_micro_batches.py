"""Micro-batching (``train.micro_batches``, issue 40): the accumulated gradient is the batch's where
samples are independent, a BatchNorm network fails the check, the memory of a step falls with the
micro-batch size, and bad values are stopped by ``d5pipe plan``. Real training on digits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from d5pipe.levels import micro_batches
from d5pipe.levels.level2.point import run_point
from tests.conftest import d5pipe
from tests.test_level2 import make_ctx, metric


def test_accumulated_gradient_equals_the_full_batch_and_training_follows_it(tmp_path: Path) -> None:
    def train(k: int) -> Any:  # a sweep over train.micro_batches: its variants share their training seed
        ctx = make_ctx(tmp_path, {"epochs": 1, "micro_batches": k}, work=f"k{k}", seed=11 + k)
        ctx.params["train.micro_batches"] = k
        return run_point(ctx)

    one, four = train(1), train(4)
    check = metric(four, "micro_batch_check")
    assert check.value == "pass" and check.kind == "verdict"
    assert metric(four, "micro_batch_grad_rel_error").value < 1e-5
    assert four.extra["micro_batch_check"]["micro_batches"] == 4
    assert not [m for m in one.metrics if m.name.startswith("micro_batch")]  # k = 1: nothing to check
    # the same steps in another summation order: the same training within float rounding
    loss1, loss4 = (o.extra["curves"]["train_loss"][-1] for o in (one, four))
    assert loss4 == pytest.approx(loss1, rel=1e-3)
    assert metric(four, "train_steps").value == metric(one, "train_steps").value


def test_batchnorm_computes_something_else_per_micro_batch_and_the_check_fails(tmp_path: Path) -> None:
    cnn = {"name": "cnn", "channels": 4, "blocks": 1}
    out = run_point(make_ctx(tmp_path, {"epochs": 1, "micro_batches": 4}, model=cnn))
    check = metric(out, "micro_batch_check")
    assert check.value == "fail" and "BatchNorm" in (check.detail or "")
    assert metric(out, "micro_batch_grad_rel_error").value > 1e-4


def test_a_cnn_with_per_sample_norms_passes_for_k_1_2_4_and_its_step_memory_falls(tmp_path: Path) -> None:
    """The Must show of issue 40: on the CNN (GroupNorm: statistics per sample), k = 2 and 4 pass
    the gradient check and the peak tensor memory of a step falls with k."""
    cnn = {"name": "cnn", "channels": 16, "blocks": 1, "norm": "group"}
    peaks = {}
    for k in (1, 2, 4):
        out = run_point(make_ctx(tmp_path, {"epochs": 1, "batch_size": 512, "micro_batches": k,
                                            "measure_memory": True}, model=cnn, work=f"c{k}"))
        peaks[k] = metric(out, "step_peak_memory").value
        if k > 1:
            assert metric(out, "micro_batch_check").value == "pass", metric(out, "micro_batch_check").detail
    assert peaks[1] > peaks[2] > peaks[4] > 0, peaks


def test_an_accumulation_that_sums_without_scaling_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong accumulation -- each micro-batch's mean loss summed, not weighted by its share --
    gives k times the gradient; the check sees it. The right one passes on the same network."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    assert micro_batches.check(model, x, y, 4, 1e-4)[0][0].value == "pass"

    def summed(model: Any, loss_fn: Any, xb: torch.Tensor, yb: torch.Tensor, k: int) -> torch.Tensor:
        total = torch.zeros(())
        for xm, ym in micro_batches.split(xb, yb, k):
            loss = loss_fn(model(xm), ym)  # no "* len(ym) / len(yb)"
            loss.backward()
            total = total + loss.detach()
        return total

    monkeypatch.setattr(micro_batches, "backward", summed)
    [check, error], _ = micro_batches.check(model, x, y, 4, 1e-4)
    assert check.value == "fail" and error.value == pytest.approx(3.0, rel=1e-6)  # 4x the gradient: error 3


def test_split_and_dropout_idle_during_the_check() -> None:
    x, y = torch.arange(10.0).reshape(10, 1), torch.arange(10)
    parts = micro_batches.split(x, y, 4)
    assert [len(p[1]) for p in parts] == [3, 3, 2, 2] and torch.equal(torch.cat([p[0] for p in parts]), x)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    metrics, info = micro_batches.check(model, torch.randn(12, 8), torch.randint(0, 3, (12,)), 3, 1e-4)
    assert metrics[0].value == "pass" and info["dropout"].startswith("idle")


def test_step_memory_falls_with_smaller_micro_batches(tmp_path: Path) -> None:
    wide = {"name": "mlp", "hidden": [256, 256]}  # activations outweigh the weights' gradients
    peaks = {}
    for k in (1, 4):
        out = run_point(make_ctx(tmp_path, {"epochs": 1, "batch_size": 1024, "micro_batches": k,
                                            "measure_memory": True}, model=wide, work=f"m{k}"))
        peaks[k] = metric(out, "step_peak_memory").value
        assert out.extra["memory"]["method"]
    assert 0 < peaks[4] < peaks[1]  # activations of 256 samples at a time instead of 1024


def test_bad_micro_batches_are_stopped_before_any_job(tmp_path: Path) -> None:
    too_many = d5pipe("plan", "quickstart", "stages=[level2]", "train.micro_batches=100000")
    assert too_many.returncode == 2 and too_many.stderr.count("\n") == 1, too_many.stderr
    assert "train.micro_batches" in too_many.stderr
    zero = d5pipe("plan", "quickstart", "stages=[level2]", "train.micro_batches=0")
    assert zero.returncode == 2 and "train.micro_batches" in zero.stderr, zero.stderr
    level3 = d5pipe("plan", "quickstart", "stages=[level3]", "train.micro_batches=2")
    assert level3.returncode == 2 and "level 3 does not split batches" in level3.stderr, level3.stderr


def test_level1_forward_backward_in_micro_batches_checked_and_lighter(tmp_path: Path) -> None:
    """Level 1: fwd_bwd in micro-batches, its check (in float64, so a bfloat16 network passes on its
    mathematics) and its peak memory against one batch; inference is untouched."""
    from d5pipe.levels.level1.point import run_point as run_level1
    from tests.test_level1 import make_ctx as level1_ctx
    from tests.test_level1 import values

    wide = {"name": "mlp", "hidden": [256, 256]}
    out = {k: values(run_level1(level1_ctx(tmp_path / f"k{k}", wide, {"batch_size": 512, "micro_batches": k})))
           for k in (1, 4)}
    assert out[4]["micro_batch_check"].value == "pass" and "micro_batch_check" not in out[1]
    assert 0 < out[4]["peak_memory_fwd_bwd"].value < out[1]["peak_memory_fwd_bwd"].value
    assert out[4]["fwd_bwd_time"].value > 0 and out[4]["inference_latency"].value > 0
    half = values(run_level1(level1_ctx(tmp_path / "bf16", {"name": "mlp", "hidden": [32]},
                                        {"batch_size": 32, "micro_batches": 2, "dtype": "bfloat16"})))
    assert half["micro_batch_check"].value == "pass"
    bn = values(run_level1(level1_ctx(tmp_path / "bn", {"name": "cnn", "channels": 4, "blocks": 1},
                                      {"batch_size": 16, "micro_batches": 2})))
    assert bn["micro_batch_check"].value == "fail"
