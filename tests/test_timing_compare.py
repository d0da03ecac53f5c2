"""The one comparison model (d5pipe.results.timing_compare) on constructed repetitions, and the
exact and numerical comparisons of the other metrics (d5pipe.results.metric_compare)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from d5pipe.results.metric_compare import ComparePolicy, MetricValue, compare_metric
from d5pipe.results.repetition_values import Side, derived_timings, find_outliers, repetitions_needed
from d5pipe.results.timing_compare import Item, Policy, adjust, compare_family, compare_one, lower_is_better


def test_the_three_verdicts_on_constructed_repetitions() -> None:
    # changed: the CI excludes 1 and the test rejects
    slow = compare_one("time", "s", [1.00, 1.02, 0.99, 1.01], [1.25, 1.27, 1.24, 1.26])
    assert slow.verdict == "changed" and slow.direction == "slower" and slow.ci is not None and slow.ci[0] > 1
    assert slow.slowdown == pytest.approx(0.25, abs=0.01) and slow.label() == "changed (slower)"
    # equivalent: not changed, and the whole CI within x1.1 either way
    same = compare_one("time", "s", [1.00, 1.02, 0.99, 1.01], [1.01, 1.00, 1.02, 0.99])
    assert same.verdict == "equivalent" and same.ci is not None and 1 / 1.1 <= same.ci[0] and same.ci[1] <= 1.1
    # inconclusive: noisy, neither; it says how many repetitions would decide
    noisy = compare_one("time", "s", [1.0, 1.4, 0.8], [1.1, 0.9, 1.5])
    assert noisy.verdict == "inconclusive" and noisy.needed is not None and noisy.needed > 3
    assert f"~{noisy.needed} repetitions per side would decide a 10% change" in noisy.text()
    # faster is a change too; a rate's direction is the other way round
    assert compare_one("time", "s", [1.25, 1.27, 1.24], [1.0, 1.01, 0.99]).direction == "faster"
    assert compare_one("tput", "samples/s", [100, 101, 99], [80, 81, 79]).direction == "slower"


def test_a_1000x_outlier_repetition_is_named_and_left_out() -> None:
    """One repetition 1,300x its siblings (the issue's 16 ms against 12 us): named as an outlier,
    left out of the test, and the verdict says so."""
    a = [12e-6, 12.1e-6, 11.9e-6]
    b = [12.05e-6, 16e-3, 11.95e-6]
    c = compare_one("time", "s", a, b)
    assert [(o.side, o.repetition) for o in c.outliers] == [("B", 1)]
    assert c.outliers[0].factor == pytest.approx(16e-3 / 12e-6, rel=0.01)
    assert c.verdict != "changed" and c.ratio == pytest.approx(1.0, abs=0.01)
    assert "left out: B repetition 1" in c.text() and "1,333x its siblings' median" in c.text()
    # two far repetitions of five is a spread, not outliers; a bimodal 1.5x split is no outlier either
    assert find_outliers(Side.of([1.0, 1.0, 1.0, 5.0, 5.0]), "A") == ()
    assert find_outliers(Side.of([1.0, 1.5, 1.02]), "A") == ()


def test_holm_keeps_a_family_of_a_a_comparisons_quiet_and_finds_a_real_slowdown() -> None:
    """Simulated processes (between-process noise 10%), 5 repetitions a side, 20 timings per
    comparison: an A/A comparison has a 'changed' anywhere in about alpha of the families; every
    timing 25% slower is found."""
    rng = np.random.default_rng(11)

    def family(shift: float, noise: float) -> list[Item]:
        return [Item(f"t{i}", "s", Side.of(rng.lognormal(0, noise, 5).tolist()),
                     Side.of(rng.lognormal(math.log(shift), noise, 5).tolist())) for i in range(20)]

    false = sum(any(c.verdict == "changed" for c in compare_family(family(1.0, 0.1))) for _ in range(200))
    assert false / 200 <= 0.08
    found = [c.verdict == "changed" and c.direction == "slower" for _ in range(10)
             for c in compare_family(family(1.25, 0.03))]
    assert all(found)


def test_adjustments() -> None:
    p = [0.01, 0.04, 0.03, 0.20]
    assert adjust(p, "holm") == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert adjust(p, "bh") == pytest.approx([0.04, 0.0533333, 0.0533333, 0.20])
    assert adjust(p, "none") == p


def test_the_family_moderates_a_lucky_small_variance() -> None:
    """Three repetitions that happen to agree to 0.1% do not make a 3% difference a change when
    the family's other timings vary by 10% between processes."""
    rng = np.random.default_rng(4)
    others = [Item(f"t{i}", "s", Side.of(rng.lognormal(0, 0.1, 3).tolist()),
                   Side.of(rng.lognormal(0, 0.1, 3).tolist())) for i in range(6)]
    lucky = Item("lucky", "s", Side.of([1.000, 1.001, 0.999]), Side.of([1.030, 1.031, 1.029]))
    alone = compare_family([lucky])[0]
    assert alone.verdict == "changed"  # its own variance, by itself
    within = compare_family([lucky, *others])[0]
    assert within.verdict != "changed" and "moderated" in within.test


def test_paired_rounds_cancel_what_both_sides_share() -> None:
    """Rounds measured interleaved share the machine's state: the paired test sees the 10% change
    through a 30% drift between rounds that hides it from the unpaired one."""
    drift = [1.0, 1.3, 0.8, 1.2, 0.9]
    a = [d * 1.00 * (1 + 0.005 * (-1) ** i) for i, d in enumerate(drift)]
    b = [d * 1.10 * (1 - 0.005 * (-1) ** i) for i, d in enumerate(drift)]
    assert compare_one("time", "s", a, b).verdict == "inconclusive"
    paired = compare_one("time", "s", a, b, paired=True)
    assert paired.verdict == "changed" and "paired" in paired.test and paired.ratio == pytest.approx(1.1, rel=0.01)


def test_run_noise_makes_separate_runs_honest() -> None:
    """A known between-run variance widens the CI of an unpaired comparison; when it alone exceeds
    the margin, more repetitions cannot decide and the verdict says to interleave."""
    a, b = [1.0, 1.01, 0.99, 1.0], [1.12, 1.13, 1.11, 1.12]
    assert compare_one("time", "s", a, b).verdict == "changed"
    c = compare_one("time", "s", a, b, Policy(run_noise=0.1))
    assert c.verdict == "inconclusive" and c.needed is None and "d5pipe ab" in c.reason
    assert compare_one("time", "s", a, [x * 2 for x in a], Policy(run_noise=0.1)).verdict == "changed"


def test_repetitions_needed_grow_with_the_variance_and_shrink_with_the_margin() -> None:
    small, big = repetitions_needed(0.01, 0.10, 0.05), repetitions_needed(0.04, 0.10, 0.05)
    assert 2 <= small < big
    assert repetitions_needed(0.01, 0.25, 0.05) < small
    assert repetitions_needed(0.01, 0.10, 0.05, paired=True) < small


def test_constant_sides_are_exact_and_one_process_is_not_compared() -> None:
    assert compare_one("time", "s", [2.0, 2.0], [2.0, 2.0]).verdict == "equivalent"
    assert compare_one("time", "s", [2.0, 2.0], [3.0, 3.0]).verdict == "changed"
    one = compare_one("time", "s", [1.0], [3.0])
    assert one.verdict == "not_compared" and "one process per side" in one.reason


def test_derived_timings_follow_the_one_they_are_computed_from() -> None:
    t = [1e-3, 1.2e-3, 0.9e-3]
    follows = derived_timings({"time": t, "gflops": [2.0 / x for x in t], "gbps": [5.0 / x for x in t],
                               "time_bwd": [2e-3, 2.1e-3, 2.5e-3]})
    assert follows == {"gflops": "time", "gbps": "time"}


def test_direction_by_unit() -> None:
    assert lower_is_better("s") and lower_is_better("ms")
    assert not lower_is_better("GFLOP/s") and not lower_is_better("samples/s")
    assert not lower_is_better("", "speedup") and not lower_is_better("", "efficiency")


@pytest.mark.parametrize("kind", ["deterministic", "count", "verdict"])
def test_exact_kinds(kind: str) -> None:
    a = MetricValue(value="pass" if kind == "verdict" else 42.0, kind=kind)
    b = MetricValue(value="fail" if kind == "verdict" else 43.0, kind=kind)
    assert compare_metric("m", a, a).verdict == "reproduced"
    c = compare_metric("m", a, b)
    assert c.verdict == "not_reproduced" and "!=" in c.detail and c.label() == "differs"
    tiny = MetricValue(value=42.0 + 1e-12, kind=kind) if kind != "verdict" else b
    assert compare_metric("m", a, tiny).verdict == "not_reproduced"


def test_numerical_tolerance_is_configurable() -> None:
    a = MetricValue(value=0.5, kind="numerical")
    close = MetricValue(value=0.5002, kind="numerical")
    far = MetricValue(value=0.6, kind="numerical")
    assert compare_metric("loss", a, close).label() == "within tolerance"  # default rtol 1e-3
    assert compare_metric("loss", a, close, ComparePolicy(rtol=1e-6, atol=0.0)).verdict == "not_reproduced"
    assert compare_metric("loss", a, far).verdict == "not_reproduced"
    assert compare_metric("loss", a, far, ComparePolicy(atol=0.2)).verdict == "reproduced"
    nan = MetricValue(value=math.nan, kind="numerical")
    assert compare_metric("loss", nan, nan).verdict == "reproduced"
    assert compare_metric("loss", a, nan).verdict == "not_reproduced"


def test_info_and_timings_are_not_compared_metric_by_metric() -> None:
    assert compare_metric("device", MetricValue("cpu", kind="info"), MetricValue("cuda", kind="info")).verdict \
        == "not_compared"
    assert compare_metric("time", MetricValue(1.0, "s", "timing"), MetricValue(2.0, "s", "timing")).verdict \
        == "not_compared"
