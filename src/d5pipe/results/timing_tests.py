"""The tests behind the comparison model (d5pipe.results.timing_compare): Welch's t on the logs of
two sides' repetitions, or paired t on the log ratios of interleaved rounds; each timing's variance
floored by its family's (Smyth's moderated variance where a timing's own is lower); Holm's, Benjamini-Hochberg's
or no adjustment over a family. Measured on this machine (README, "Comparing runs"): the floor
keeps interleaved A/A comparisons as quiet as no moderation while it finds more of a real change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

Correction = Literal["holm", "bh", "none"]

PRIOR_DF = 4.0
"""How many degrees of freedom the family's variance counts for in each timing's (Smyth's moderated
t, with a fixed prior weight): three repetitions alone leave Welch's test about two."""


PRIOR_MIN_TIMINGS = 3
"""A family of fewer timings gives no prior: each is tested on its own variance."""


@dataclass(frozen=True)
class TestResult:
    diff: float
    se: float
    df: float
    p: float
    var_pooled: float
    """Variance of one repetition's log value (of one round's log ratio, paired) used."""
    name: str


@dataclass(frozen=True)
class LogValues:
    """A tested timing's log values (paired: the two sides of each kept round)."""

    a: list[float]
    b: list[float]

    def variances(self, paired: bool) -> list[tuple[float, int]]:
        """(sample variance, degrees of freedom) of each side, or of the paired differences."""
        if paired:
            return [_var([y - x for x, y in zip(self.a, self.b)])]
        return [_var(self.a), _var(self.b)]


def _var(xs: Sequence[float]) -> tuple[float, int]:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1), len(xs) - 1


@dataclass(frozen=True)
class Prior:
    """What the family says about one repetition's variance: the median variance over its timings
    (``var``) and how much to trust it (``df``, :data:`PRIOR_DF`); ``run_var``: the variance a
    separate run adds to its timings' log values, in a comparison of runs measured apart."""

    var: float = 0.0
    df: float = 0.0
    run_var: float = 0.0

    def moderate(self, var: float, df: int) -> tuple[float, float]:
        """A timing's variance and degrees of freedom, the family's as a floor: a variance below the
        family's is shrunk toward it (Smyth's moderated variance, with the prior's degrees of
        freedom); a variance above it is kept as it is. Three repetitions that happen to agree do
        not make a small difference a change, and a timing noisier than its family is never made
        to look quieter (its variances differ: small kernels are noisier than large ones)."""
        if self.df <= 0:
            return var, float(df)
        shrunk = (self.df * self.var + df * var) / (self.df + df)
        return (shrunk, self.df + df) if shrunk > var else (var, float(df))


def t_test(logs: LogValues, paired: bool, prior: Prior) -> TestResult:
    from scipy import stats

    la, lb = logs.a, logs.b
    if paired:
        d = [y - x for x, y in zip(la, lb)]
        n = len(d)
        vd, df = prior.moderate(*_var(d))
        diff, se, pooled, name = sum(d) / n, math.sqrt(vd / n), vd / 2, "paired t on the log ratios of rounds"
    else:
        (va, da), (vb, db) = prior.moderate(*_var(la)), prior.moderate(*_var(lb))
        se2 = va / len(la) + vb / len(lb)
        denom = (va / len(la)) ** 2 / da + (vb / len(lb)) ** 2 / db
        df = se2 ** 2 / denom if denom > 0 else da + db
        se2 += 2 * prior.run_var  # each run's own shift: a known variance, no degrees of freedom
        se = math.sqrt(se2)
        diff, pooled, name = sum(lb) / len(lb) - sum(la) / len(la), (va + vb) / 2 + prior.run_var, "Welch t on logs"
    if prior.df > 0:
        name += " (variance moderated by the family's)"
    if se == 0.0:
        return TestResult(diff, 0.0, df, 0.0 if diff != 0 else 1.0, pooled, name)
    p = float(2 * stats.t.sf(abs(diff / se), df))
    return TestResult(diff, se, df, p, pooled, name)


def adjust(p_values: Sequence[float], correction: Correction) -> list[float]:
    """Adjusted p-values (Holm's step-down, Benjamini-Hochberg's step-up, or unchanged)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [1.0] * m
    if correction == "none":
        return [min(1.0, p) for p in p_values]
    if correction == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p_values[i]))
            out[i] = running
        return out
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, min(1.0, p_values[i] * m / (rank + 1)))
        out[i] = running
    return out


def family_prior(logs: Sequence[LogValues], paired: bool, run_noise: float = 0.0) -> Prior:
    """The family's variance of one repetition (the median over its timings, :data:`PRIOR_DF`
    degrees of freedom) when it has at least :data:`PRIOR_MIN_TIMINGS` timings, else none."""
    variances = [v for item in logs for v, df in item.variances(paired) if df >= 1]
    run_var = 0.0 if paired else run_noise ** 2
    if len(logs) < PRIOR_MIN_TIMINGS or not variances:
        return Prior(run_var=run_var)
    return Prior(median(variances), PRIOR_DF, run_var)
