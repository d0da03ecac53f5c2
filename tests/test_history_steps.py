"""Steps in series of runs (d5pipe.history.steps): synthetic histories whose noise is real
run-to-run variation of this machine (tests/data/run_noise.json, recorded by
benchmarks/record_run_noise.py: one level-0 operator timed in many separate processes, grouped into
runs of three repetitions), half of them with a +10% step at a random run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from d5pipe.history.steps import MIN_RUNS, check_series, family_noise

NOISE = Path(__file__).parent / "data" / "run_noise.json"
SERIES, RUNS, STEP = 200, 40, 1.10


def _recorded_runs() -> dict[str, list[float]]:
    """Per recorded series, each run's value as the check reads it: its best (fastest) repetition."""
    doc = json.loads(NOISE.read_text())
    return {name: [float(np.min(reps)) for reps in runs] for name, runs in doc["series"].items()}


SEEDS = (20261204, 1, 2, 3, 4, 5, 6, 7, 8, 9)
"""Ten draws of the 200 series: one draw's rate moves by a few points (92-100 found on this
noise), so the goal is held by the rate over all of them."""


def _draw(recorded: dict[str, list[float]], seed: int) -> tuple[int, int, int, int]:
    """(steps found at their run +-1, steps, step-free series flagged, step-free series) of one draw."""
    names = sorted(recorded)
    rng = np.random.default_rng(seed)
    histories, truth = [], []
    for i in range(SERIES):
        runs = recorded[names[(i // 2) % len(names)]]  # each recorded point with and without a step
        y = np.log(rng.choice(runs, size=RUNS, replace=True))  # real runs, drawn in a random order
        k = int(rng.integers(MIN_RUNS, RUNS - MIN_RUNS + 1)) if i % 2 == 0 else None
        if k is not None:
            y[k:] += math.log(STEP)
        histories.append(y)
        truth.append(k)
    noise = family_noise(histories)
    checks = [check_series(y, noise) for y in histories]
    with_step = [(c, k) for c, k in zip(checks, truth) if k is not None]
    found = sum(any(abs(s.index - k) <= 1 for s in c.steps) for c, k in with_step)
    flagged = sum(bool(c.steps) for c, k in zip(checks, truth) if k is None)
    return found, len(with_step), flagged, SERIES - len(with_step)


def test_most_ten_percent_steps_are_found_at_their_run_and_steady_series_stay_quiet() -> None:
    recorded = _recorded_runs()
    draws = [_draw(recorded, seed) for seed in SEEDS]
    found, steps, flagged, steady = (sum(d[i] for d in draws) for i in range(4))
    sd = {n: float(np.std(np.log(r), ddof=1)) for n, r in recorded.items()}
    print(f"\nrun-to-run sd of log value: {', '.join(f'{n} {v:.3f}' for n, v in sd.items())}; "
          f"steps found at their run (+-1): {found}/{steps} = {found / steps:.1%} "
          f"(per draw {', '.join(str(d[0]) for d in draws)} of {draws[0][1]}); "
          f"step-free series flagged: {flagged}/{steady} = {flagged / steady:.1%} "
          f"(per draw {', '.join(str(d[2]) for d in draws)} of {draws[0][3]})")
    assert found >= 0.95 * steps  # the goal, on this machine's recorded noise
    assert flagged <= 0.05 * steady


def test_a_constant_series_is_steady_and_a_clean_step_is_found_with_its_ci() -> None:
    assert check_series([0.0] * 12).status == "steady"
    y = [0.0, 0.01, -0.01, 0.0, 0.01, math.log(1.5), math.log(1.5) + 0.01, math.log(1.5) - 0.01, math.log(1.5)]
    c = check_series(y)
    assert c.status == "steps" and [s.index for s in c.steps] == [5]
    lo, hi = c.steps[0].ci
    assert lo < 1.5 < hi and lo > 1.3


def test_too_few_or_too_noisy_runs_say_so_instead_of_steady() -> None:
    few = check_series([0.0, 0.1, 0.0])
    assert few.status == "inconclusive" and "a step needs" in few.note
    rng = np.random.default_rng(0)
    noisy = check_series(rng.normal(0, 0.3, 10))  # 30% between runs: a 10% step would hide in it
    assert noisy.status == "inconclusive" and noisy.needed is not None and noisy.needed > 10
    assert "too noisy" in noisy.note or "not confirmed" in noisy.note


def test_slow_runs_do_not_hide_a_clear_step_and_a_small_one_is_kept_but_not_reported() -> None:
    """Whole runs 35-40% slow (as this machine has) widen the pooled test's variance until a clean
    +10% step is not confirmed by it (p 0.43 here); Yuen's trimmed test confirms it, with the
    trimmed means' ratio and CI. A clean +2% step is confirmed but under the 5% threshold: the
    series reads steady, and its note and ``small`` keep the step."""
    from d5pipe.history import steps

    rng = np.random.default_rng(3)
    before = rng.normal(0, 0.004, 12)
    after = math.log(1.10) + rng.normal(0, 0.004, 12)
    before[4] += math.log(1.35)
    after[[3, 8]] += math.log(1.4)
    y = np.concatenate([before, after])
    assert steps._test(before, after, 0.0).p * 2 * (len(y) - 3) > 0.05  # the pooled test alone: not confirmed
    c = check_series(y)
    assert c.status == "steps" and [s.index for s in c.steps] == [12]
    lo, hi = c.steps[0].ci
    assert 1.08 < lo < 1.10 < hi < 1.12

    z = np.concatenate([rng.normal(0, 0.002, 15), math.log(1.02) + rng.normal(0, 0.002, 15)])
    small = check_series(z)
    assert small.status == "steady" and not small.steps
    assert [s.index for s in small.small] == [15] and "under 5% not reported" in small.note
    assert check_series(z, threshold=0.01).status == "steps"
