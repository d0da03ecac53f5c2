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


def test_most_ten_percent_steps_are_found_at_their_run_and_steady_series_stay_quiet() -> None:
    recorded = _recorded_runs()
    names = sorted(recorded)
    rng = np.random.default_rng(20261204)
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
    sd = {n: float(np.std(np.log(r), ddof=1)) for n, r in recorded.items()}
    print(f"\nrun-to-run sd of log value: {', '.join(f'{n} {v:.3f}' for n, v in sd.items())}; "
          f"steps found at their run (+-1): {found}/{len(with_step)}; "
          f"step-free series flagged: {flagged}/{SERIES - len(with_step)}")
    # the goal is >= 95% found and <= 5% flagged; measured here 94/100 and 6/100 (other seeds: 97 and
    # 4, 89 and 5; README, "History"): the test holds a little below what was measured, not the goal
    assert found >= 0.85 * len(with_step)
    assert flagged <= 0.08 * (SERIES - len(with_step))


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
