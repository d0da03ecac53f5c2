"""Statistics for nondeterministic measurements (shared by every level).

The rules follow Hoefler & Belli, "Scientific Benchmarking of Parallel Computing Systems" (SC'15):

* summarise timings by the **median** with a **nonparametric 95% confidence interval** built from
  order statistics (the number of samples below the true median is Binomial(n, 1/2));
* report the spread (IQR, min, CV) and count Tukey outliers, but never drop samples;
* check normality (Shapiro-Wilk) instead of assuming it;

All functions are pure: they take sequences of floats and return numbers or dataclasses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from d5pipe.core.outcome import Declared, Metric
from d5pipe.measure.normality import binom_half_cdf, shapiro_wilk

CONFIDENCE = 0.95
"""Default confidence level of every interval d5pipe reports."""

SPREAD: dict[str, tuple[str, bool, str]] = {
    "iqr": ("iqr", True, "interquartile range"),
    "min": ("min", True, "smallest sample"),
    "mean": ("mean", True, "mean"),
    "std": ("std", True, "sample standard deviation"),
    "cv": ("cv", False, "coefficient of variation, std / mean"),
    "normal_p": ("normal_p", False, "Shapiro-Wilk p-value (normality)"),
    "n_samples": ("n", False, "samples taken"),
    "outliers": ("outliers", False, "Tukey outliers (counted, never dropped)"),
}
"""The spread beside a timing (:meth:`Summary.to_metrics`): name suffix -> (:class:`Summary`
attribute, whether it has the timing's unit, meaning)."""


def timing_declared(name: str, unit: str, samples: str, about: str, prefix: str) -> dict[str, Declared]:
    """The declarations of what :meth:`Summary.to_metrics` emits for ``name``: the median and its spread."""
    return {name: Declared(unit, "timing", samples, about),
            **{f"{prefix}{s}": Declared(unit if timed else "", "info", None, f"{name}'s {what}")
               for s, (_, timed, what) in SPREAD.items()}}


HIGH_VARIATION_IQR_RATIO = 0.10
"""Warn when IQR / median exceeds this (the threshold torch.utils.benchmark uses)."""

SHAPIRO_MAX_N = 5000
"""scipy's Shapiro-Wilk p-value is only accurate up to this many samples; larger sets are subsampled."""

TUKEY_K = 1.5


def _as_array(samples: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(samples, dtype=np.float64).ravel()
    if arr.size == 0:
        raise ValueError("statistics need at least one sample")
    if not np.all(np.isfinite(arr)):
        raise ValueError("samples contain NaN or infinity")
    return arr


@dataclass(frozen=True)
class MedianCI:
    """A confidence interval of the median from order statistics."""

    low: float
    high: float
    coverage: float
    """The exact coverage probability of ``[low, high]`` (>= the requested level when ``exact``)."""
    exact: bool
    """False when n is too small to reach the requested level; then ``[min, max]`` is returned."""


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int, float]:
    """0-based ranks ``(lo, hi)`` of the order statistics bounding the median, and their coverage.

    ``P(x_(lo) <= median <= x_(hi)) = P(lo + 1 <= B <= hi)`` with ``B ~ Binomial(n, 1/2)``; the
    interval is symmetric and the narrowest with coverage >= ``confidence``. When even ``[min, max]``
    falls short (n <= 5 at 95%), that interval is returned with its true, lower coverage.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    alpha = 1.0 - confidence
    cdf = binom_half_cdf(n)
    # j = number of m in 0..n with P(B <= m) <= alpha/2; the interval is [x_(j), x_(n-j+1)] (1-based).
    j = int(np.searchsorted(cdf, alpha / 2.0, side="right"))
    if j == 0:
        coverage = 1.0 - 2.0 * 0.5**n
        return 0, n - 1, coverage
    coverage = 1.0 - 2.0 * float(cdf[j - 1])
    return j - 1, n - j, coverage


def median_ci(samples: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> MedianCI:
    """Nonparametric confidence interval of the median (distribution-free, valid for skewed data)."""
    arr = np.sort(_as_array(samples))
    lo, hi, coverage = median_ci_ranks(arr.size, confidence)
    return MedianCI(float(arr[lo]), float(arr[hi]), coverage, coverage >= confidence)


def tukey_outliers(samples: Sequence[float] | np.ndarray, k: float = TUKEY_K) -> tuple[int, int]:
    """Counts of samples below ``Q1 - k*IQR`` and above ``Q3 + k*IQR``. Nothing is dropped."""
    arr = _as_array(samples)
    q1, q3 = np.percentile(arr, [25.0, 75.0])
    iqr = q3 - q1
    return int(np.sum(arr < q1 - k * iqr)), int(np.sum(arr > q3 + k * iqr))


def shapiro_p(samples: Sequence[float] | np.ndarray, seed: int = 0) -> float:
    """Shapiro-Wilk p-value; NaN when undefined (n < 3 or all samples equal).

    Above :data:`SHAPIRO_MAX_N` samples a seeded random subsample of that size is tested.
    """
    arr = _as_array(samples)
    if arr.size < 3 or float(np.ptp(arr)) == 0.0:
        return math.nan
    if arr.size > SHAPIRO_MAX_N:
        rng = np.random.default_rng(seed)
        arr = rng.choice(arr, size=SHAPIRO_MAX_N, replace=False)
    return shapiro_wilk(arr)[1]


@dataclass(frozen=True)
class Rate:
    """A rate ``work / time`` with the time's median CI carried through (bounds swap)."""

    value: float
    ci_low: float
    ci_high: float


def rate_from_time(work: float, median_s: float, ci_low_s: float, ci_high_s: float) -> Rate:
    """``work / time``; the rate's CI is ``[work / ci_high, work / ci_low]``.

    ``x -> work / x`` is monotone decreasing, so order statistics (and hence the median and its
    order-statistic CI) map onto each other with the bounds swapped.
    """

    def div(t: float) -> float:
        return work / t if t > 0 else math.inf

    return Rate(div(median_s), div(ci_high_s), div(ci_low_s))


@dataclass(frozen=True)
class Summary:
    """Everything d5pipe reports about one set of nondeterministic samples."""

    n: int
    median: float
    ci_low: float
    ci_high: float
    ci_coverage: float
    ci_exact: bool
    q1: float
    q3: float
    iqr: float
    min: float
    max: float
    mean: float
    std: float
    """Sample standard deviation (ddof=1; 0 for a single sample)."""
    cv: float
    """Coefficient of variation std / mean (NaN when the mean is 0)."""
    outliers_low: int
    outliers_high: int
    normal_p: float
    """Shapiro-Wilk p-value (NaN when undefined)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def outliers(self) -> int:
        return self.outliers_low + self.outliers_high

    @property
    def ci_half_width_rel(self) -> float:
        """Largest distance from the median to a CI bound, relative to the median."""
        if self.median == 0:
            return math.inf
        return max(self.median - self.ci_low, self.ci_high - self.median) / abs(self.median)

    def rate(self, work: float) -> Rate:
        """``work / median`` with the CI carried through (for times in seconds)."""
        return rate_from_time(work, self.median, self.ci_low, self.ci_high)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d

    def to_metrics(
        self,
        name: str = "time",
        unit: str = "s",
        samples_key: str | None = None,
        prefix: str = "",
    ) -> list[Metric]:
        """Metrics for a record: ``name`` (median, kind timing, CI, samples key) and the spread:
        ``{prefix}<s>`` for each ``s`` of :data:`SPREAD` (declared by :func:`timing_declared`)."""
        key = samples_key if samples_key is not None else name
        return [Metric(name, self.median, unit, "timing", self.ci_low, self.ci_high, key),
                *(Metric(f"{prefix}{s}", getattr(self, attr), unit if timed else "", "info")
                  for s, (attr, timed, _) in SPREAD.items())]


def summarize(samples: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> Summary:
    """Median with order-statistic CI, spread, outlier counts, normality and warnings."""
    arr = _as_array(samples)
    n = int(arr.size)
    median = float(np.median(arr))
    ci = median_ci(arr, confidence)
    q1, q3 = (float(v) for v in np.percentile(arr, [25.0, 75.0]))
    mean = float(np.mean(arr))
    std = float(np.std(arr, ddof=1)) if n > 1 else 0.0
    cv = std / mean if mean != 0 else math.nan
    low, high = tukey_outliers(arr)
    normal_p = shapiro_p(arr)
    warnings: list[str] = []
    if median != 0 and (q3 - q1) / abs(median) > HIGH_VARIATION_IQR_RATIO:
        warnings.append(
            f"high variation: IQR is {100 * (q3 - q1) / abs(median):.1f}% of the median"
        )
    if not ci.exact:
        warnings.append(
            f"only {n} samples: the median CI [min, max] covers {100 * ci.coverage:.1f}%, "
            f"not {100 * confidence:.0f}%"
        )
    return Summary(
        n=n,
        median=median,
        ci_low=ci.low,
        ci_high=ci.high,
        ci_coverage=ci.coverage,
        ci_exact=ci.exact,
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        min=float(np.min(arr)),
        max=float(np.max(arr)),
        mean=mean,
        std=std,
        cv=cv,
        outliers_low=low,
        outliers_high=high,
        normal_p=normal_p,
        warnings=tuple(warnings),
    )


def rate_metric(name: str, work: float, summary: Summary, unit: str, samples_key: str) -> Metric:
    """A rate metric (e.g. GFLOP/s) derived from a time summary, CI carried through."""
    rate = summary.rate(work)
    return Metric(name, rate.value, unit, "timing", rate.ci_low, rate.ci_high, samples_key)
