"""d5pipe.measure.timer: raw samples, block sizing, stop rule and budget (by counts and flags, not wall time)."""

from __future__ import annotations

import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.measure.timer import MAX_OVERHEAD_FRACTION, measure, timer_conf

FAST = {"warmup_s": 0.01, "warmup_max_iters": 5, "min_block_s": 0.002}


class Counter:
    """A real single-threaded workload (~microseconds of Python arithmetic) that counts its calls.

    (A multi-threaded torch op would stall for whole scheduler slices on a shared 2-core box.)
    """

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return sum(i * i for i in range(50))


def test_returns_raw_samples_and_summary() -> None:
    fn = Counter()
    m = measure(fn, {**FAST, "budget_s": 5.0, "target_ci_pct": 50.0, "min_samples": 12}, "cpu")
    assert m.clock == "perf_counter_ns"
    assert len(m.samples) == m.summary.n >= 12
    assert all(s > 0 for s in m.samples)
    assert m.summary.min == min(m.samples)
    # every timed sample is one block of reps calls; warm-up calls come on top
    assert fn.calls >= m.warmup_iters + len(m.samples) * m.calls_per_block
    assert m.warmup_iters <= 5


def test_blocks_make_timer_overhead_negligible() -> None:
    fn = Counter()
    m = measure(fn, {**FAST, "min_block_s": 0.005, "budget_s": 3.0, "target_ci_pct": 50.0}, "cpu")
    block = m.calls_per_block * m.summary.median
    assert m.calls_per_block > 1
    assert m.clock_overhead_s < MAX_OVERHEAD_FRACTION * block


def test_warmup_is_bounded_by_iterations() -> None:
    m = measure(Counter(), {**FAST, "warmup_s": 100.0, "warmup_max_iters": 3, "budget_s": 0.5}, "cpu")
    assert m.warmup_iters == 3


def test_stops_at_target_when_loose() -> None:
    m = measure(Counter(), {**FAST, "target_ci_pct": 100.0, "min_samples": 10, "budget_s": 30.0}, "cpu")
    assert m.target_met and m.stop_reason == "target"
    assert len(m.samples) >= 10
    assert not any("CI target missed" in w for w in m.warnings)


def test_unreachable_target_stops_at_max_samples() -> None:
    cfg = {**FAST, "target_ci_pct": 1e-9, "min_samples": 5, "max_samples": 15, "budget_s": 60.0}
    m = measure(Counter(), cfg, "cpu")
    assert not m.target_met
    assert m.stop_reason == "max_samples"
    assert len(m.samples) == 15


def test_budget_spent_before_target_is_flagged() -> None:
    cfg = {**FAST, "target_ci_pct": 1e-9, "min_samples": 100000, "max_samples": 100000, "budget_s": 0.05}
    m = measure(Counter(), cfg, "cpu")
    assert not m.target_met
    assert m.stop_reason == "budget"
    assert 1 <= len(m.samples) < 100000
    assert any("CI target missed" in w for w in m.warnings)


def test_config_errors_are_user_errors() -> None:
    with pytest.raises(D5PipeError, match="budget"):
        timer_conf({"budgt_s": 1.0})
    with pytest.raises(D5PipeError, match="min_samples"):
        timer_conf({"min_samples": 10, "max_samples": 5})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
def test_cuda_requested_without_cuda_is_a_user_error() -> None:
    with pytest.raises(D5PipeError, match="cuda"):
        measure(Counter(), FAST, "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False: no GPU")
def test_cuda_path_uses_events() -> None:
    x = torch.randn(512, 512, device="cuda")
    m = measure(lambda: x @ x, {**FAST, "budget_s": 1.0, "target_ci_pct": 50.0}, "cuda")
    assert m.clock == "cuda_event"
    assert len(m.samples) >= 1 and all(s > 0 for s in m.samples)
