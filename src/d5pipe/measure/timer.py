"""The shared timer: warm-up, blocks of calls, device synchronisation, CI-based stop rule.

``measure(fn, cfg, device)`` calls ``fn()`` many times and returns a :class:`Measurement` with the
raw per-iteration samples (seconds) and their :class:`d5pipe.measure.stats.Summary`.

Procedure (every level uses it, so it knows nothing about operators or models):

1. **Warm-up**: call ``fn`` until ``warmup_s`` has passed or ``warmup_max_iters`` calls were made
   (at least one call). The median warm-up call (the first excluded) estimates one call's cost.
2. **Block sizing**: a block is ``calls`` back-to-back calls between two clock reads. ``calls`` is
   chosen so that a block lasts >= ``min_block_s`` *and* the clock's own overhead (measured here,
   on this machine) is < 0.1% of a block, as torch.utils.benchmark's ``blocked_autorange`` does.
   If the first block is still too short, ``calls`` is grown and that block is discarded.
3. **Blocks**: each block yields one sample ``block_time / calls``. After ``min_samples`` samples the
   95% CI of the median (order statistics) is checked after every block; measuring stops when it is
   within +-``target_ci_pct``% of the median (``target_met=True``), when ``max_samples`` samples were
   taken, or when ``budget_s`` (counted from the end of the warm-up, so a slow first call does not
   eat it) is spent (``target_met=False``). At least one sample is always taken.

Under ``d5pipe ab`` the timer hands the turn to the other side's process after the warm-up and
after every block (d5pipe.measure.lockstep); the time spent waiting for it is not part of the
budget or of ``total_s``.

Devices: on ``cuda*`` each block is bracketed by CUDA events after a ``torch.cuda.synchronize()``,
and the end event is synchronised before it is read; on the CPU ``time.perf_counter_ns`` is used.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import conf_from_dict
from d5pipe.measure import energy, lockstep
from d5pipe.measure.stats import CONFIDENCE, Summary, median_ci, summarize
from d5pipe.measure.timer_schema import TimerConf, check_timer

MAX_OVERHEAD_FRACTION = 1e-3
"""The timer's own cost must stay below this fraction of a block."""


def timer_conf(cfg: TimerConf | Mapping[str, Any] | None) -> TimerConf:
    """A :class:`TimerConf` from a dataclass, a plain dict or a DictConfig: the schema's own checks
    (d5pipe.core.fields.conf_from_dict) and its cross-field check, nothing re-implemented here."""
    if cfg is None:
        return TimerConf()
    if isinstance(cfg, TimerConf):
        return cfg
    items = dict(cfg.items())
    check_timer(items)
    return conf_from_dict(TimerConf, "timer", items)


class BlockClock(Protocol):
    """Times ``calls`` back-to-back calls of a function, synchronising the device."""

    name: str

    def time_block(self, fn: Callable[[], object], calls: int) -> float:
        """Seconds taken by ``calls`` calls of ``fn`` (device work included)."""
        ...


class CpuClock:
    """``time.perf_counter_ns`` around the block; CPU work is synchronous."""

    name = "perf_counter_ns"

    def time_block(self, fn: Callable[[], object], calls: int) -> float:
        counter = time.perf_counter_ns
        start = counter()
        for _ in range(calls):
            fn()
        return (counter() - start) * 1e-9


class CudaClock:
    """CUDA events around the block, with ``torch.cuda.synchronize`` before and after."""

    name = "cuda_event"

    def __init__(self, device: str) -> None:
        import torch

        if not torch.cuda.is_available():
            raise D5PipeError(f"timer: device {device!r} requested but torch.cuda.is_available() is False")
        self._torch = torch
        self._device = torch.device(device)

    def time_block(self, fn: Callable[[], object], calls: int) -> float:
        cuda = self._torch.cuda
        with cuda.device(self._device):
            start = cuda.Event(enable_timing=True)
            end = cuda.Event(enable_timing=True)
            cuda.synchronize()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            cuda.synchronize()
            return float(start.elapsed_time(end)) * 1e-3


def clock_for(device: str) -> BlockClock:
    """The clock for a device string: CUDA events for ``cuda*``, ``perf_counter_ns`` otherwise."""
    return CudaClock(device) if device.startswith("cuda") else CpuClock()


def _noop() -> None:
    return None


def clock_overhead_s(clock: BlockClock, trials: int = 20) -> float:
    """The smallest observed cost of timing an empty one-call block with ``clock``."""
    return min(clock.time_block(_noop, 1) for _ in range(trials))


@dataclass
class Measurement:
    """Raw samples and their summary, plus how they were taken."""

    samples: list[float]
    """Per-iteration seconds: each block's time divided by its number of calls."""
    summary: Summary
    calls_per_block: int
    target_met: bool
    """True when the CI of the median got within +-target_ci_pct% before the budget ran out."""
    stop_reason: str
    """``target``, ``max_samples`` or ``budget``."""
    warmup_iters: int
    warmup_s: float
    total_s: float
    clock: str
    clock_overhead_s: float
    device: str
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    energy: dict[str, Any] = field(default_factory=dict)
    """d5pipe.measure.energy's record of the timed blocks: joules, per call, watts and the method;
    or ``available: False`` and the reason."""

    @property
    def median(self) -> float:
        return self.summary.median

    def info(self) -> dict[str, Any]:
        """JSON-serialisable description of the measurement (without the raw samples)."""
        raw = ("samples", "summary", "warnings")
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in raw},
                "ci_coverage": self.summary.ci_coverage}


def _calls_for(per_call_s: float, min_block_s: float, overhead_s: float) -> int:
    """Calls per block so that a block lasts >= min_block_s and overhead < 0.1% of it."""
    target_block = max(min_block_s, overhead_s / MAX_OVERHEAD_FRACTION)
    per_call = max(per_call_s, 1e-9)
    return max(1, math.ceil(target_block / per_call))


def _ci_within(samples: list[float], rel: float) -> bool:
    """True when the exact 95% CI of the median lies within +-rel of the median."""
    ci = median_ci(samples, CONFIDENCE)
    median = float(np.median(samples))
    return ci.exact and median > 0 and max(median - ci.low, ci.high - median) <= rel * median


def measure(
    fn: Callable[[], object],
    cfg: TimerConf | Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> Measurement:
    """Time ``fn()`` (see the module docstring for the procedure) and keep every sample."""
    conf = timer_conf(cfg)
    clock = clock_for(device)
    overhead = clock_overhead_s(clock)
    t_start = time.perf_counter()
    waited = 0.0  # time the partner of d5pipe ab held the baton: not this measurement's budget

    def elapsed() -> float:
        return time.perf_counter() - t_start - waited

    def turn() -> None:
        nonlocal waited
        t0 = time.perf_counter()
        lockstep.yield_turn()
        waited += time.perf_counter() - t0

    # 1. warm-up (each call timed individually, with device synchronisation)
    warm_times: list[float] = []
    while True:
        warm_times.append(clock.time_block(fn, 1))
        if elapsed() >= conf.warmup_s or len(warm_times) >= conf.warmup_max_iters:
            break
    warmup_s = elapsed()
    per_call = float(np.median(warm_times[1:] or warm_times))  # the first call may be far slower
    turn()
    t_measure = elapsed()

    def spent() -> bool:
        return elapsed() - t_measure >= conf.budget_s

    # 2. block sizing: grow calls until one block is long enough (discarded blocks count as warm-up)
    calls = _calls_for(per_call, conf.min_block_s, overhead)
    min_block = max(conf.min_block_s, overhead / MAX_OVERHEAD_FRACTION)
    samples: list[float] = []
    span, timed_calls = energy.Span(energy.meter(device)), 0

    def block(n: int) -> float:
        """One timed block of ``n`` calls, its energy read around it (outside the clock's time)."""
        nonlocal timed_calls
        span.begin()
        took = clock.time_block(fn, n)
        span.end()
        timed_calls += n
        return took

    while True:
        block_s = block(calls)
        turn()
        if block_s >= 0.5 * min_block or spent():
            samples.append(block_s / calls)
            break
        calls = min(_calls_for(block_s / calls, conf.min_block_s, overhead) * 2, calls * 10)

    # 3. blocks until the CI target, max_samples or the budget
    stop_reason = ""
    target_met = False
    while True:
        if len(samples) >= conf.min_samples:
            if _ci_within(samples, conf.target_ci_pct / 100.0):
                target_met, stop_reason = True, "target"
                break
            if len(samples) >= conf.max_samples:
                stop_reason = "max_samples"
                break
        if spent():
            stop_reason = "budget"
            break
        samples.append(block(calls) / calls)
        turn()

    summary = summarize(samples)
    warnings = list(summary.warnings)
    if not target_met:
        warnings.append(
            f"CI target missed: 95% CI of the median is +-{100 * summary.ci_half_width_rel:.1f}% "
            f"(target +-{conf.target_ci_pct}%) after {len(samples)} samples, stopped by {stop_reason}"
        )
    return Measurement(
        samples=samples,
        summary=summary,
        calls_per_block=calls,
        target_met=target_met,
        stop_reason=stop_reason,
        warmup_iters=len(warm_times),
        warmup_s=warmup_s,
        total_s=elapsed(),
        clock=clock.name,
        clock_overhead_s=overhead,
        device=device,
        config=dataclasses.asdict(conf),
        warnings=warnings,
        energy=span.record(timed_calls),
    )
