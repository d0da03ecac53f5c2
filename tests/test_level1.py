"""d5pipe.levels.level1.point: latency/throughput/fwd+bwd/peak memory of whole models through the shared timer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe.levels.contract import PointContext, PointSkipped
from d5pipe.levels.level1.point import run_point
from d5pipe.measure.memory import peak_memory
from tests.test_metric_declarations import emitted_undeclared

FAST_TIMER = {"warmup_s": 0.01, "budget_s": 0.15, "min_samples": 5, "min_block_s": 0.002}


def make_ctx(tmp_path: Path, model: dict[str, Any], level1: dict[str, Any], seed: int = 1) -> PointContext:
    cfg = {"name": "t", "seed": 0, "model": model, "dataset": {"name": "digits"},
           "level1": level1, "timer": FAST_TIMER}
    return PointContext("t", "level1", "p1", {}, cfg, seed, tmp_path, tmp_path / "work",
                        tmp_path / "data", {})


def values(outcome: Any) -> dict[str, Any]:
    return {m.name: m for m in outcome.metrics}


def test_cpu_point_reports_latency_throughput_and_positive_peak_memory(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"name": "mlp", "hidden": [64]}, {"batch_size": 32}))
    m = values(out)
    lat, thr = m["inference_latency"], m["inference_throughput"]
    assert lat.kind == "timing" and lat.value > 0 and lat.ci_low <= lat.value <= lat.ci_high
    assert thr.value == pytest.approx(32 / lat.value)
    # every sample is kept; how many fit the 0.15 s budget depends on the machine's load (the
    # budget outranks min_samples, tests/test_timer.py), so only "at least one" is certain here
    assert len(out.samples["inference_latency_s"]) == m["inference_latency_n_samples"].value >= 1
    assert m["fwd_bwd_time"].value > 0 and m["train_throughput"].value > 0
    for name in ("peak_memory_inference", "peak_memory_fwd_bwd"):
        assert m[name].unit == "B" and m[name].value > 0
    # forward+backward holds activations and gradients: more than inference's output
    assert m["peak_memory_fwd_bwd"].value > m["peak_memory_inference"].value
    assert out.extra["memory_inference"]["method"] == "torch_profiler_alloc_events"
    assert emitted_undeclared("level1", out.metrics) == []  # docs/reference/metrics.md names each


def test_cpu_peak_memory_sees_a_known_allocation() -> None:
    keep: list[torch.Tensor] = []
    peak = peak_memory(lambda: keep.append(torch.ones(512, 1024)), "cpu")  # 2 MiB float32
    assert peak.bytes >= 2 * 1024 * 1024


def test_cpu_peak_memory_is_the_calls_own_live_allocations_on_every_call() -> None:
    """Dropping a tensor made before the call and allocating two of 1 MiB, one freed before the
    next: the peak is 1 MiB (the call's own live bytes), whatever the profiler sees of the old one's
    free -- so a repeated call reads the same number (a reproduction compares it exactly)."""
    held = [torch.ones(256, 1024)]

    def call() -> None:
        held.clear()
        a = torch.ones(256, 1024)
        del a
        held.append(torch.ones(256, 1024))

    assert {peak_memory(call, "cpu").bytes for _ in range(20)} == {1024 * 1024}


def test_cnn_channels_last_bfloat16(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"name": "cnn", "channels": 8, "blocks": 1},
                             {"batch_size": 16, "dtype": "bfloat16", "layout": "channels_last"}))
    assert values(out)["inference_latency"].value > 0


def test_unsupported_combinations_are_skipped(tmp_path: Path) -> None:
    with pytest.raises(PointSkipped, match="channels_last"):
        run_point(make_ctx(tmp_path, {"name": "mlp"}, {"layout": "channels_last"}))
    if not torch.cuda.is_available():
        with pytest.raises(PointSkipped, match="CUDA"):
            run_point(make_ctx(tmp_path, {"name": "mlp"}, {"device": "cuda"}))


@pytest.mark.slow
def test_torch_compile_point_records_compile_time(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"name": "mlp", "hidden": [32]},
                             {"batch_size": 16, "impl": "compile", "measure_memory": False}))
    m = values(out)
    assert m["compile_inference_s"].kind == "info" and m["compile_inference_s"].value > 0
    assert m["inference_latency"].value > 0 and m["fwd_bwd_time"].value > 0


def test_flops_per_sample_are_counted_and_read_against_the_measured_peak(tmp_path: Path) -> None:
    # digits: 64 features, 10 classes; mlp hidden [64] = Linear(64, 64) -> ReLU -> Linear(64, 10)
    out = run_point(make_ctx(tmp_path, {"name": "mlp", "hidden": [64]}, {"batch_size": 32}))
    m = values(out)
    forward = 2 * (64 * 64 + 64 * 10)
    assert m["flops_per_sample_inference"].value == forward
    # backward: weight gradients of both layers, the input gradient of the second only
    assert m["flops_per_sample_fwd_bwd"].value == forward + 2 * 64 * 64 + 2 * (2 * 64 * 10)
    for mode, rate in (("inference", "inference_throughput"), ("fwd_bwd", "train_throughput")):
        g = m[f"gflops_{mode}"]
        assert g.value == pytest.approx(m[rate].value * m[f"flops_per_sample_{mode}"].value / 1e9)
        assert g.ci_low <= g.value <= g.ci_high
        assert m[f"pct_peak_flops_{mode}"].value == pytest.approx(100 * g.value / m["peak_gflops"].value)
    assert "FlopCounterMode" in out.extra["flops"]
    off = values(run_point(make_ctx(tmp_path, {"name": "mlp", "hidden": [64]}, {"batch_size": 32, "peak": False})))
    assert "flops_per_sample_inference" in off and "pct_peak_flops_inference" not in off
