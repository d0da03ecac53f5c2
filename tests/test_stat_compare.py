"""Statistical comparison by metric kind: error rates measured over many synthetic trials."""

from __future__ import annotations

import math

import numpy as np
import pytest

from d5pipe.results.metric_compare import ComparePolicy, MetricValue, compare_metric, compare_samples, higher_is_worse


def _timing(samples: np.ndarray) -> MetricValue:
    return MetricValue(value=float(np.median(samples)), unit="s", kind="timing",
                       samples=tuple(float(x) for x in samples))


def test_false_positive_rate_is_near_alpha() -> None:
    """Same distribution on both sides: 'changed' must occur at about rate alpha."""
    rng = np.random.default_rng(12345)
    trials, n, alpha = 400, 25, 0.05
    hits = 0
    for _ in range(trials):
        a = rng.lognormal(mean=-6.0, sigma=0.3, size=n)
        b = rng.lognormal(mean=-6.0, sigma=0.3, size=n)
        c = compare_metric("t", _timing(a), _timing(b), ComparePolicy(alpha=alpha))
        hits += c.verdict == "changed"
    rate = hits / trials
    assert 0.02 <= rate <= 0.09, rate


def test_detects_a_twenty_percent_shift() -> None:
    """A 20% slowdown with 40 samples per side and 20% noise is detected with power > 0.9."""
    rng = np.random.default_rng(2024)
    trials, n = 200, 40
    detected = 0
    rel_changes = []
    for _ in range(trials):
        a = rng.lognormal(mean=-6.0, sigma=0.2, size=n)
        b = 1.2 * rng.lognormal(mean=-6.0, sigma=0.2, size=n)
        c = compare_metric("t", _timing(a), _timing(b))
        if c.verdict == "changed":
            detected += 1
            assert c.direction == "higher"
        assert c.rel_change is not None
        rel_changes.append(c.rel_change)
    assert detected / trials > 0.9, detected / trials
    assert abs(float(np.median(rel_changes)) - 0.2) < 0.05


def test_identical_samples_reproduce_and_report_cis() -> None:
    x = np.linspace(1.0, 2.0, 30)
    t = compare_samples(x, x.copy())
    assert t.p_value == pytest.approx(1.0) and not t.significant
    assert t.ci_overlap is True and t.ci_ref is not None and t.ci_ref[0] <= 1.5 <= t.ci_ref[1]
    const = compare_samples([3.0] * 5, [3.0] * 5)
    assert const.p_value == 1.0 and const.rel_change == 0.0


def test_min_rel_change_suppresses_tiny_significant_shifts() -> None:
    a = np.linspace(1.0, 1.01, 200)
    b = a * 1.002
    assert compare_metric("t", _timing(a), _timing(b)).verdict == "changed"
    lenient = ComparePolicy(min_rel_change=0.01)
    assert compare_metric("t", _timing(a), _timing(b), lenient).verdict == "reproduced"


def test_timing_without_samples_falls_back_to_ci_overlap() -> None:
    ref = MetricValue(value=1.0, unit="s", kind="timing", ci_low=0.9, ci_high=1.1)
    same = MetricValue(value=1.05, unit="s", kind="timing", ci_low=0.95, ci_high=1.15)
    slow = MetricValue(value=2.0, unit="s", kind="timing", ci_low=1.8, ci_high=2.2)
    assert compare_metric("t", ref, same).verdict == "reproduced"
    c = compare_metric("t", ref, slow)
    assert c.verdict == "changed" and c.direction == "higher" and c.rel_change == pytest.approx(1.0)
    bare = MetricValue(value=1.0, unit="s", kind="timing")
    assert compare_metric("t", bare, bare).verdict == "not_reproduced"


@pytest.mark.parametrize("kind", ["deterministic", "count", "verdict"])
def test_exact_kinds(kind: str) -> None:
    a = MetricValue(value="pass" if kind == "verdict" else 42.0, kind=kind)
    b = MetricValue(value="fail" if kind == "verdict" else 43.0, kind=kind)
    assert compare_metric("m", a, a).verdict == "reproduced"
    c = compare_metric("m", a, b)
    assert c.verdict == "not_reproduced" and "!=" in c.detail
    tiny = MetricValue(value=42.0 + 1e-12, kind=kind) if kind != "verdict" else b
    assert compare_metric("m", a, tiny).verdict == "not_reproduced"


def test_numerical_tolerance_is_configurable() -> None:
    a = MetricValue(value=0.5, kind="numerical")
    close = MetricValue(value=0.5002, kind="numerical")
    far = MetricValue(value=0.6, kind="numerical")
    assert compare_metric("loss", a, close).verdict == "reproduced"  # default rtol 1e-3
    assert compare_metric("loss", a, close, ComparePolicy(rtol=1e-6, atol=0.0)).verdict == "not_reproduced"
    c = compare_metric("loss", a, far)
    assert c.verdict == "not_reproduced" and c.direction == "higher"
    assert compare_metric("loss", a, far, ComparePolicy(atol=0.2)).verdict == "reproduced"
    nan = MetricValue(value=math.nan, kind="numerical")
    assert compare_metric("loss", nan, nan).verdict == "reproduced"
    assert compare_metric("loss", a, nan).verdict == "not_reproduced"


def test_info_is_not_compared() -> None:
    c = compare_metric("device", MetricValue("cpu", kind="info"), MetricValue("cuda", kind="info"))
    assert c.verdict == "not_compared"


def test_direction_of_worse_by_unit() -> None:
    assert higher_is_worse("s") and higher_is_worse("ms")
    assert not higher_is_worse("GFLOP/s") and not higher_is_worse("samples/s")


def test_rate_metric_on_time_samples_reports_the_rate_change() -> None:
    """A GFLOP/s metric whose samples are times: slower times are a lower rate, same p-value."""
    rng = np.random.default_rng(5)
    t_ref = rng.lognormal(-6.0, 0.05, 40)
    t_new = 1.25 * rng.lognormal(-6.0, 0.05, 40)

    def rate(t: np.ndarray) -> MetricValue:
        return MetricValue(1.0 / float(np.median(t)), "GFLOP/s", "timing", samples=tuple(t.tolist()))

    c_rate = compare_metric("gflops", rate(t_ref), rate(t_new))
    c_time = compare_metric("time", _timing(t_ref), _timing(t_new))
    assert c_rate.verdict == c_time.verdict == "changed"
    assert c_rate.p_value == c_time.p_value
    assert c_time.direction == "higher" and c_rate.direction == "lower"
    assert c_rate.rel_change is not None and c_rate.rel_change == pytest.approx(1 / 1.25 - 1, abs=0.05)
