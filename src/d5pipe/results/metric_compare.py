"""Compare one metric between a reference run and a candidate run, by metric kind.

* ``deterministic``, ``count``, ``verdict``: exact equality (NaN equals NaN; a missing value only
  equals a missing value) -> ``reproduced`` or ``not_reproduced``.
* ``numerical``: ``math.isclose(ref, new, rel_tol=rtol, abs_tol=atol)`` -> ``reproduced`` or
  ``not_reproduced`` (defaults ``rtol=1e-3``, ``atol=1e-6``; configurable).
* ``timing``: two-sided Mann–Whitney U test on the raw samples at significance level ``alpha``
  (default 0.05). ``p < alpha`` (and ``|relative change| >= min_rel_change``, default 0) ->
  ``changed``, with direction (``higher``/``lower``) and relative change of the metric's value
  (the median for a time; for a rate whose samples are times, the rate), else ``reproduced``. The nonparametric 95% CIs of both medians and whether they overlap are
  reported too; when raw samples are missing on either side the decision falls back to CI overlap
  (no overlap -> ``changed``), and without CIs either to ``not_reproduced``. When the samples are
  too few for the test ever to reach ``alpha`` (smallest attainable two-sided p of the exact test,
  ``2 / C(n_ref + n_new, n_ref)``, is ``>= alpha``; e.g. 3 epochs per side) the verdict is
  ``not_compared``: "reproduced" would claim what the data cannot show.
* ``info``: ``not_compared``.

Per metric, a significant change of a timing is not a reproduction (verdict ``changed``). Whether it
makes a whole re-run "not reproduced" is the policy of :mod:`d5pipe.provenance.reproduce` (by default it
does not; ``--strict-timing``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

import numpy as np

from d5pipe.measure.stats import median_ci

Verdict = Literal["reproduced", "not_reproduced", "changed", "not_compared"]
EXACT_KINDS = frozenset({"deterministic", "count", "verdict"})
TIME_UNITS = frozenset({"s", "ms", "us", "µs", "ns", "min", "h", "sec", "seconds"})


@dataclass(frozen=True)
class ComparePolicy:
    """How strict a comparison is."""

    alpha: float = 0.05
    rtol: float = 1e-3
    atol: float = 1e-6
    min_rel_change: float = 0.0
    confidence: float = 0.95


@dataclass(frozen=True)
class MetricValue:
    """One side of a comparison: the value of a metric in one run, with its raw samples if any."""

    value: float | str | None
    unit: str = ""
    kind: str = "numerical"
    ci_low: float | None = None
    ci_high: float | None = None
    samples: tuple[float, ...] | None = None


@dataclass(frozen=True)
class SampleTest:
    """Result of comparing two sets of raw samples."""

    n_ref: int
    n_new: int
    median_ref: float
    median_new: float
    rel_change: float | None
    p_value: float
    significant: bool
    ci_ref: tuple[float, float] | None
    ci_new: tuple[float, float] | None
    ci_overlap: bool | None


@dataclass(frozen=True)
class Comparison:
    """The verdict on one metric."""

    metric: str
    kind: str
    verdict: Verdict
    reference: float | str | None
    candidate: float | str | None
    unit: str = ""
    rel_change: float | None = None
    direction: Literal["higher", "lower"] | None = None
    p_value: float | None = None
    ci_overlap: bool | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("reference", "candidate", "rel_change", "p_value"):
            v = out[key]
            if isinstance(v, float) and not math.isfinite(v):
                out[key] = None if math.isnan(v) else str(v)
        return out



def higher_is_worse(unit: str) -> bool:
    """For a timing metric: True when a larger value is a slowdown (times), False for rates (x/s)."""
    u = unit.strip()
    if u in TIME_UNITS:
        return True
    return not (u.endswith("/s") or u.lower().endswith("per_s") or u.lower().endswith("/sec"))


def min_attainable_p(n_ref: int, n_new: int) -> float:
    """Smallest two-sided p-value the exact Mann–Whitney U test can give for these sample sizes."""
    return min(1.0, 2.0 / math.comb(n_ref + n_new, n_ref))


def _median_ci(samples: np.ndarray, confidence: float) -> tuple[float, float] | None:
    """Nonparametric CI of the median (d5pipe.measure.stats); None for fewer than 2 samples."""
    if samples.size < 2:
        return None
    ci = median_ci(samples, confidence)
    return ci.low, ci.high


def _overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool | None:
    if a is None or b is None:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def _rel(ref: float, new: float) -> float | None:
    if ref == 0:
        return None if new == 0 else math.copysign(math.inf, new)
    return (new - ref) / abs(ref)


def compare_samples(ref: Any, new: Any, alpha: float = 0.05, confidence: float = 0.95) -> SampleTest:
    """Two-sided Mann–Whitney U test plus median CIs of two sample sets (NaNs dropped)."""
    a = np.asarray(ref, dtype=float)
    b = np.asarray(new, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        raise ValueError("compare_samples needs at least one finite sample on each side")
    if np.all(a == a[0]) and np.all(b == a[0]):
        p = 1.0  # identical constants: no evidence of a difference
    else:
        from scipy import stats  # only when two sample sets are actually compared

        p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    ci_a, ci_b = _median_ci(a, confidence), _median_ci(b, confidence)
    return SampleTest(
        n_ref=int(a.size), n_new=int(b.size), median_ref=med_a, median_new=med_b,
        rel_change=_rel(med_a, med_b), p_value=p, significant=p < alpha,
        ci_ref=ci_a, ci_new=ci_b, ci_overlap=_overlap(ci_a, ci_b),
    )


def _is_missing(v: float | str | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _same(a: float | str | None, b: float | str | None) -> bool:
    if _is_missing(a) or _is_missing(b):
        return _is_missing(a) and _is_missing(b)
    return a == b


def _as_float(v: float | str | None) -> float | None:
    if _is_missing(v) or isinstance(v, str):
        return None
    return float(cast(float, v))


def _fmt(v: float | str | None) -> str:
    return "missing" if _is_missing(v) else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _compare_timing(name: str, ref: MetricValue, new: MetricValue, policy: ComparePolicy) -> Comparison:
    base: dict[str, Any] = {"metric": name, "kind": "timing", "reference": ref.value, "candidate": new.value, "unit": ref.unit}
    if ref.samples and new.samples:
        # The samples may be those of another metric (a rate derived from times): the rank test and
        # the CI overlap are invariant under that monotone transform; change and direction are taken
        # from the metric's own values when both are numbers, else from the sample medians.
        t = compare_samples(ref.samples, new.samples, policy.alpha, policy.confidence)
        va, vb = _as_float(ref.value), _as_float(new.value)
        lo, hi = (va, vb) if va is not None and vb is not None else (t.median_ref, t.median_new)
        rel = _rel(lo, hi)
        big_enough = rel is None or abs(rel) >= policy.min_rel_change
        changed = t.significant and big_enough
        direction: Literal["higher", "lower"] | None = None
        if changed and hi != lo:
            direction = "higher" if hi > lo else "lower"
        pct = "n/a" if rel is None else f"{rel:+.1%}"
        cis = "overlap" if t.ci_overlap else "disjoint" if t.ci_overlap is False else "n/a"
        detail = (f"{lo:.6g} -> {hi:.6g} {ref.unit} ({pct}), Mann-Whitney U p={t.p_value:.3g} "
                  f"(alpha {policy.alpha}) on n={t.n_ref}/{t.n_new} samples, median CIs {cis}")
        floor = min_attainable_p(t.n_ref, t.n_new)
        testable = floor < policy.alpha
        if not testable:
            detail += f"; too few samples to test (smallest attainable p {floor:.3g} >= alpha)"
        return Comparison(
            **base, verdict="not_compared" if not testable else "changed" if changed else "reproduced",
            rel_change=rel,
            direction=direction, p_value=t.p_value, ci_overlap=t.ci_overlap, detail=detail,
            extra={"samples_median_ref": t.median_ref, "samples_median_new": t.median_new,
                   "n_ref": t.n_ref, "n_new": t.n_new, "samples_ci_ref": t.ci_ref,
                   "samples_ci_new": t.ci_new, "test": "mannwhitneyu"},
        )
    a, b = _as_float(ref.value), _as_float(new.value)
    if _is_missing(ref.value) and _is_missing(new.value):
        return Comparison(**base, verdict="reproduced", detail="missing in both runs")
    if a is None or b is None:
        return Comparison(**base, verdict="not_reproduced", detail=f"{_fmt(ref.value)} -> {_fmt(new.value)}")
    ci_a = (ref.ci_low, ref.ci_high) if ref.ci_low is not None and ref.ci_high is not None else None
    ci_b = (new.ci_low, new.ci_high) if new.ci_low is not None and new.ci_high is not None else None
    overlap = _overlap(ci_a, ci_b)
    rel = _rel(a, b)
    if overlap is None:
        return Comparison(**base, verdict="not_reproduced", rel_change=rel,
                          detail="no raw samples and no CI on one side: cannot test")
    direction = ("higher" if b > a else "lower") if not overlap and a != b else None
    return Comparison(**base, verdict="reproduced" if overlap else "changed", rel_change=rel,
                      direction=direction, ci_overlap=overlap,
                      detail=f"no raw samples; CIs {ci_a} vs {ci_b} {'overlap' if overlap else 'disjoint'}")


def compare_metric(name: str, ref: MetricValue, new: MetricValue, policy: ComparePolicy | None = None) -> Comparison:
    """Compare metric ``name`` of the reference run with the candidate run, by ``ref.kind``."""
    policy = policy or ComparePolicy()
    kind = ref.kind
    if kind == "info":
        return Comparison(metric=name, kind=kind, verdict="not_compared", reference=ref.value,
                          candidate=new.value, unit=ref.unit, detail="info metric")
    if kind == "timing":
        return _compare_timing(name, ref, new, policy)
    base: dict[str, Any] = {"metric": name, "kind": kind, "reference": ref.value, "candidate": new.value, "unit": ref.unit}
    if kind in EXACT_KINDS:
        same = _same(ref.value, new.value)
        return Comparison(**base, verdict="reproduced" if same else "not_reproduced",
                          detail="identical" if same else f"{_fmt(ref.value)} != {_fmt(new.value)}")
    # numerical (and any unknown kind, treated the same way)
    if _is_missing(ref.value) or _is_missing(new.value) or isinstance(ref.value, str) or isinstance(new.value, str):
        same = _same(ref.value, new.value)
        return Comparison(**base, verdict="reproduced" if same else "not_reproduced",
                          detail=f"{_fmt(ref.value)} vs {_fmt(new.value)}")
    a, b = float(cast(float, ref.value)), float(cast(float, new.value))
    close = math.isclose(a, b, rel_tol=policy.rtol, abs_tol=policy.atol) or (math.isinf(a) and a == b)
    rel = _rel(a, b)
    return Comparison(
        **base, verdict="reproduced" if close else "not_reproduced", rel_change=rel,
        direction=None if close or a == b else ("higher" if b > a else "lower"),
        detail=f"{a:.9g} vs {b:.9g} (|diff| {abs(b - a):.3g}; rtol {policy.rtol}, atol {policy.atol})",
    )
