"""d5pipe.measure.stats against numpy/scipy on known data, and CI coverage on skewed samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from d5pipe.measure import stats


def test_median_ci_ranks_match_binomial_definition() -> None:
    # n = 20 at 95%: P(B <= 5) = 0.0207 <= 0.025 < P(B <= 6) = 0.0577, so the CI is [x_(6), x_(15)]
    lo, hi, coverage = stats.median_ci_ranks(20)
    assert (lo, hi) == (5, 14)
    assert coverage == pytest.approx(1 - 2 * sps.binom.cdf(5, 20, 0.5))
    assert coverage >= 0.95


def test_median_ci_small_n_is_flagged_inexact() -> None:
    ci = stats.median_ci([3.0, 1.0, 2.0])
    assert (ci.low, ci.high) == (1.0, 3.0)
    assert not ci.exact
    assert ci.coverage == pytest.approx(1 - 2 * 0.5**3)


def test_summary_matches_numpy_and_scipy() -> None:
    rng = np.random.default_rng(7)
    data = rng.lognormal(mean=0.0, sigma=0.4, size=101)
    s = stats.summarize(data)
    q1, q3 = np.percentile(data, [25, 75])
    assert s.n == 101
    assert s.median == pytest.approx(np.median(data))
    assert s.iqr == pytest.approx(sps.iqr(data))
    assert (s.q1, s.q3) == (pytest.approx(q1), pytest.approx(q3))
    assert s.min == data.min() and s.max == data.max()
    assert s.mean == pytest.approx(np.mean(data))
    assert s.std == pytest.approx(np.std(data, ddof=1))
    assert s.cv == pytest.approx(sps.variation(data, ddof=1))
    assert s.normal_p == pytest.approx(sps.shapiro(data).pvalue)
    low = int(np.sum(data < q1 - 1.5 * (q3 - q1)))
    high = int(np.sum(data > q3 + 1.5 * (q3 - q1)))
    assert (s.outliers_low, s.outliers_high) == (low, high)
    assert s.ci_low <= s.median <= s.ci_high
    assert s.ci_exact


def test_outliers_counted_not_dropped() -> None:
    data = [1.0] * 10 + [1.1] * 10 + [50.0]
    s = stats.summarize(data)
    assert s.outliers_high == 1 and s.outliers_low == 0
    assert s.n == 21 and s.max == 50.0


def test_shapiro_edge_cases() -> None:
    assert math.isnan(stats.shapiro_p([1.0, 2.0]))
    assert math.isnan(stats.shapiro_p([5.0] * 10))
    big = np.random.default_rng(1).normal(size=6000)
    p = stats.shapiro_p(big)
    assert 0.0 <= p <= 1.0
    skewed = np.random.default_rng(2).exponential(size=500)
    assert stats.shapiro_p(skewed) < 1e-6


def test_high_variation_warning() -> None:
    rng = np.random.default_rng(3)
    assert any("high variation" in w for w in stats.summarize(rng.uniform(1, 3, 50)).warnings)
    assert not any("high variation" in w for w in stats.summarize(rng.uniform(1, 1.01, 50)).warnings)


def test_rate_ci_swaps_bounds() -> None:
    s = stats.summarize(np.linspace(1.0, 2.0, 41))
    r = s.rate(10.0)
    assert r.value == pytest.approx(10.0 / s.median)
    assert r.ci_low == pytest.approx(10.0 / s.ci_high)
    assert r.ci_high == pytest.approx(10.0 / s.ci_low)
    assert r.ci_low < r.value < r.ci_high


def test_to_metrics_kinds_and_samples_key() -> None:
    s = stats.summarize(np.linspace(1.0, 2.0, 30))
    metrics = {m.name: m for m in s.to_metrics("latency", "s", "lat", prefix="latency_")}
    assert metrics["latency"].kind == "timing"
    assert metrics["latency"].samples == "lat"
    assert (metrics["latency"].ci_low, metrics["latency"].ci_high) == (s.ci_low, s.ci_high)
    assert metrics["latency_n_samples"].kind == "info" and metrics["latency_n_samples"].value == 30
    assert metrics["latency_outliers"].kind == "info"
    rate = stats.rate_metric("gflops", 2.0, s, "GFLOP/s", "lat")
    assert rate.kind == "timing" and rate.ci_low == pytest.approx(2.0 / s.ci_high)


@pytest.mark.slow
def test_median_ci_coverage_on_lognormal() -> None:
    """The CI must cover the true median of a skewed distribution ~95% of the time (exactly its
    binomial coverage, since order-statistic CIs are distribution-free)."""
    rng = np.random.default_rng(12345)
    sigma, n, draws = 1.0, 40, 4000
    true_median = 1.0  # median of lognormal(mu=0, sigma) is exp(0)
    data = rng.lognormal(0.0, sigma, size=(draws, n))
    _, _, coverage = stats.median_ci_ranks(n)
    hits = 0
    for row in data:
        ci = stats.median_ci(row)
        hits += ci.low <= true_median <= ci.high
    observed = hits / draws
    # binomial standard error of the observed rate is ~0.003; allow 4 of them
    assert abs(observed - coverage) < 4 * math.sqrt(coverage * (1 - coverage) / draws)
    assert 0.94 <= observed <= 0.985


@pytest.mark.parametrize("n", [3, 4, 5, 6, 9, 11, 12, 30, 200, 2000])
def test_shapiro_wilk_and_binomial_cdf_agree_with_scipy(n: int) -> None:
    """The numpy implementations (no scipy import in the jobs) match scipy's."""
    import numpy as np
    from scipy import stats as sps

    from d5pipe.measure.normality import binom_half_cdf, shapiro_wilk

    rng = np.random.default_rng(n)
    for x in (rng.normal(size=n), rng.lognormal(size=n), rng.uniform(size=n)):
        w, p = shapiro_wilk(x)
        ref = sps.shapiro(x)
        assert w == pytest.approx(ref.statistic, abs=1e-6) and p == pytest.approx(ref.pvalue, abs=1e-5)
    assert np.allclose(binom_half_cdf(n), sps.binom.cdf(np.arange(n + 1), n, 0.5), rtol=0, atol=1e-9)


def test_summaries_do_not_import_scipy() -> None:
    import subprocess
    import sys

    code = ("import sys; from d5pipe.measure.stats import summarize; summarize([1.0, 2.0, 1.5, 1.2]); "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
