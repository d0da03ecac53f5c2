"""Timings compared across runs by their repetitions: one number per process, a test across processes.

The samples of one process do not hold the variation between processes (a point's step time in
three runs of one config: 4.72, 5.77, 6.69 ms, each with a CI far narrower than that spread), so a
test on them calls noise a change. A timing of a point is therefore compared on its repetitions
(config ``repetitions``: separate shard jobs, d5pipe.plan.build): each repetition contributes its
value (the median of its samples), and

* the ratio B / A is the ratio of the geometric means of the repetitions' values;
* its CI and the p-value come from one Welch t-test on the logarithms (Welch-Satterthwaite
  degrees of freedom), so "the CI excludes 1" and "p < alpha" are the same statement;
* **one rule**: ``changed`` (faster or slower) only when the CI of the ratio excludes 1 *and* the
  test's p is below alpha; otherwise no significant difference;
* with fewer than two repetitions on a side the timing is ``not_compared`` ("one process per
  side"), never a change;
* ``alpha`` is the family's: :func:`family_alpha` divides it by the number of timings compared
  together (Bonferroni), so an A/A comparison of many timings stays quiet as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RatioTest:
    """Candidate / reference across repetitions (see module docstring)."""

    n_ref: int
    n_new: int
    ratio: float | None
    ci: tuple[float, float] | None
    p_value: float | None
    changed: bool
    reason: str = ""
    """Why nothing was tested (``one process per side``), else empty."""


def family_alpha(alpha: float, tests: int) -> float:
    """The per-test level that keeps the chance of any false change among ``tests`` below ``alpha``."""
    return alpha / max(1, tests)


def _clean(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]


def ratio_test(ref: Sequence[float], new: Sequence[float], alpha: float) -> RatioTest:
    """Welch's t-test on log values of the repetitions; CI of the ratio at level ``1 - alpha``."""
    a, b = _clean(ref), _clean(new)
    if len(a) < 2 or len(b) < 2:
        gm_a, gm_b = geometric_mean(a), geometric_mean(b)
        return RatioTest(len(a), len(b), gm_b / gm_a if gm_a and gm_b else None, None, None, False,
                         reason=f"one process per side ({len(a)} vs {len(b)} repetitions; "
                                "set repetitions >= 2)" if min(len(a), len(b)) == 1 else "no values")
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1)
    diff = mb - ma
    se2 = va / len(la) + vb / len(lb)
    ratio = math.exp(diff)
    if se2 == 0.0:  # both sides constant: a difference is exact, equality is exact
        changed = diff != 0.0
        return RatioTest(len(a), len(b), ratio, (ratio, ratio), 0.0 if changed else 1.0, changed)
    from scipy import stats

    df = se2 ** 2 / ((va / len(la)) ** 2 / (len(la) - 1) + (vb / len(lb)) ** 2 / (len(lb) - 1)) \
        if va > 0 or vb > 0 else float(len(la) + len(lb) - 2)
    se = math.sqrt(se2)
    t = diff / se
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    ci = (math.exp(diff - half), math.exp(diff + half))
    excludes_one = ci[0] > 1.0 or ci[1] < 1.0
    return RatioTest(len(a), len(b), ratio, ci, p, excludes_one and p < alpha)


def geometric_mean(values: Sequence[float]) -> float | None:
    """Geometric mean of the positive, finite ``values`` (None when there are none): the value of a
    side of a comparison across its repetitions."""
    got = _clean(values)
    return math.exp(sum(math.log(v) for v in got) / len(got)) if got else None


@dataclass(frozen=True)
class Outcome:
    """One metric of one configuration over its repetitions (level-2 outcomes: accuracy, loss, time
    to target): the mean with its t-interval over the repetitions that reached a value, and how many
    did not (NaN: ``time_to_target_s`` of a training that never reached its target)."""

    n: int
    reached: int
    mean: float | None
    ci: tuple[float, float] | None

    def text(self, fmt: Callable[[float], str] = lambda v: f"{v:.4g}") -> str:
        if self.reached == 0:
            return f"not reached (0 of {self.n})"
        assert self.mean is not None
        value = fmt(self.mean) + (f" [{fmt(self.ci[0])}, {fmt(self.ci[1])}]" if self.ci else "")
        return value + (f", not reached in {self.n - self.reached} of {self.n}" if self.reached < self.n else "")


def outcome(values: Sequence[float], confidence: float = 0.95) -> Outcome:
    """Mean and t-interval of the finite ``values`` (one per repetition); see :class:`Outcome`."""
    got = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not got:
        return Outcome(len(values), 0, None, None)
    mean = sum(got) / len(got)
    if len(got) < 2:
        return Outcome(len(values), len(got), mean, None)
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in got) / (len(got) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(got) - 1)) * sd / math.sqrt(len(got))
    return Outcome(len(values), len(got), mean, (mean - half, mean + half))
