"""The CUDA paths of every level on a real GPU; skipped, with the reason, where there is none.

Run on a GPU machine with ``scripts/device_check.sh`` (it also prints the timer-overhead ratio).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe.levels.contract import PointContext
from d5pipe.levels.level0 import point as level0
from d5pipe.levels.level1 import point as level1
from d5pipe.levels.level2 import point as level2
from d5pipe.levels.level2.train_loop import StepClock

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="torch.cuda.is_available() is False: no GPU on this machine")

TIMER = {"warmup_s": 0.01, "warmup_max_iters": 3, "min_block_s": 0.002, "budget_s": 0.3,
         "min_samples": 5, "max_samples": 50, "target_ci_pct": 10.0}


def ctx(tmp_path: Path, stage: str, config: dict[str, Any], seed: int = 5) -> PointContext:
    cfg = {"name": "gpu", "seed": 0, "timer": TIMER, "dataset": {"name": "digits"}, **config}
    return PointContext("gpu", stage, "p", {}, cfg, seed, tmp_path, tmp_path / "work",
                        tmp_path / "data", {}, cache={})


def by_name(outcome: Any) -> dict[str, Any]:
    return {m.name: m for m in outcome.metrics}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_level0_matmul_on_cuda_uses_events_and_passes_its_checks(tmp_path: Path, dtype: str) -> None:
    out = level0.run_point(ctx(tmp_path, "level0", {"operators": {
        "op": "matmul", "size": 512, "dtype": dtype, "device": "cuda", "peak": True}}))
    m = by_name(out)
    assert out.extra["timer"]["clock"] == "cuda_event"
    assert m["correctness"].value == "pass" and m["grad_check"].value == "pass"
    assert m["time"].value > 0 and m["pct_peak_flops"].value > 0


def test_level1_on_cuda_reports_cuda_memory(tmp_path: Path) -> None:
    out = level1.run_point(ctx(tmp_path, "level1", {"model": {"name": "cnn", "channels": 8, "blocks": 1},
                                                   "level1": {"batch_size": 32, "device": "cuda"}}))
    m = by_name(out)
    assert out.extra["timer_inference"]["clock"] == "cuda_event"
    assert out.extra["memory_fwd_bwd"]["method"] == "cuda_max_memory_allocated"
    assert m["peak_memory_fwd_bwd"].value > m["peak_memory_inference"].value > 0


def test_level2_on_cuda_is_deterministic_and_times_steps_with_events(tmp_path: Path) -> None:
    train = {"epochs": 1, "batch_size": 64, "lr": 0.01, "device": "cuda", "deterministic": True}
    model = {"name": "cnn", "channels": 4, "blocks": 1}
    a = level2.run_point(ctx(tmp_path / "a", "level2", {"model": model, "train": train}))
    b = level2.run_point(ctx(tmp_path / "b", "level2", {"model": model, "train": train}))
    assert by_name(a)["weights_sha256"].value == by_name(b)["weights_sha256"].value
    assert "cuda timing events" in a.extra["timing"]
    assert all(t > 0 for t in a.samples["step_time_s"])


def test_step_clock_events_time_kernels_on_the_model_device() -> None:
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    x = torch.randn(2048, 2048, device=device)
    clock = StepClock(device)
    clock.mark()
    for _ in range(10):
        x = x @ x / 2048
    clock.mark()
    torch.cuda.synchronize(device)
    (seconds,) = clock.seconds()
    assert seconds > 1e-5  # ten 2048^3 matmuls, not an empty span
