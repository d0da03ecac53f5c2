"""A side of a timing comparison: one timing's values over the repetitions of one configuration.

What the comparison model (d5pipe.results.timing_compare) needs of them: the geometric mean, the
outlier repetitions (far from their siblings' median and from each of them), the spread between
processes and within one, how many repetitions would decide a change, the looks of the
until-decided mode, and which timings are a constant multiple or reciprocal of another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

POWER = 0.8
"""The chance of deciding that :func:`repetitions_needed` plans for."""


MAX_NEEDED = 1000
"""Repetitions-needed estimates above this are reported as this many."""


OUTLIER_K = 5.0
"""A repetition this many robust spreads from its siblings' median is an outlier ..."""


OUTLIER_MIN_FACTOR = 3.0
"""... and only when it is also this factor (or its inverse) away from it."""


OUTLIER_SPREAD_FLOOR = math.log(1.05)
"""The smallest robust spread (in log units) the outlier rule assumes: two siblings that agree to
0.1% do not make a third at +4% an outlier."""


@dataclass(frozen=True)
class Outlier:
    """A repetition far from its siblings."""

    side: Literal["A", "B"]
    repetition: int
    value: float
    factor: float
    """value / the median of its siblings."""

    def text(self, unit: str = "") -> str:
        from d5pipe.results.report.units import quantity

        f = self.factor
        times = (f"{f:,.0f}x" if f >= 10 else f"{f:.2g}x") if f >= 1 else \
            (f"1/{1 / f:,.0f}" if f <= 0.1 else f"{f:.2g}x")
        return f"{self.side} repetition {self.repetition} ({quantity(self.value, unit)}, {times} its siblings' median)"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a timing's value in each repetition (NaN: not reached), the
    repetition indices, and optionally each repetition's within-process relative spread."""

    values: tuple[float, ...]
    repetitions: tuple[int, ...] = ()
    within: tuple[float, ...] = ()
    """Per repetition: half the width of its samples' 95% CI of the median / the median."""
    fastest: bool = False
    """Whether ``values`` are each process's fastest sample (:func:`fastest_sample`), not its value."""

    @staticmethod
    def of(values: Sequence[float], repetitions: Sequence[int] | None = None,
           within: Sequence[float] | None = None, fastest: bool = False) -> Side:
        vals = tuple(float(v) for v in values)
        reps = tuple(int(r) for r in repetitions) if repetitions is not None else tuple(range(len(vals)))
        return Side(vals, reps, tuple(float(w) for w in within or ()), fastest)


@dataclass(frozen=True)
class Variation:
    """Where a side's variation arises: between its processes and within them."""

    between: float | None
    """Standard deviation of the log values across repetitions (~ relative spread); None below 2."""
    within: float | None
    """Median within-process relative CI half-width of the repetitions; None when unknown."""


def finite_list(values: Sequence[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def geometric_mean(values: Sequence[float]) -> float | None:
    """Geometric mean of the positive, finite ``values`` (None when there are none)."""
    got = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in got) / len(got)) if got else None


def find_outliers(side: Side, name: Literal["A", "B"], k: float = OUTLIER_K) -> tuple[Outlier, ...]:
    """Repetitions of ``side`` far from the median of their siblings and from each of them (module
    docstring; two far values that agree are a mode of the distribution, not outliers); needs at
    least three repetitions with a value (two cannot say which one is off)."""
    idx = [i for i, v in enumerate(side.values) if math.isfinite(v) and v > 0]
    if len(idx) < 3:
        return ()
    logs = {i: math.log(side.values[i]) for i in idx}
    out = []
    for i in idx:
        others = [logs[j] for j in idx if j != i]
        med = median(others)
        spread = max(1.4826 * median([abs(x - med) for x in others]), OUTLIER_SPREAD_FLOOR)
        dist = abs(logs[i] - med)
        nearest = min(abs(logs[i] - x) for x in others)  # two far values that agree are a mode, not outliers
        if dist > k * spread and nearest > math.log(OUTLIER_MIN_FACTOR):
            out.append(Outlier(name, side.repetitions[i], side.values[i], math.exp(logs[i] - med)))
    if len(out) * 2 >= len(idx):  # half of them "far" is a spread, not outliers
        return ()
    return tuple(out)


def used_values(side: Side, outliers: Sequence[Outlier], name: str) -> list[float]:
    """The positive, finite values of ``side`` that are not outliers."""
    skip = {o.repetition for o in outliers if o.side == name}
    return [v for v, r in zip(side.values, side.repetitions) if r not in skip and math.isfinite(v) and v > 0]


def variation(side: Side, outliers: Sequence[Outlier], name: str) -> Variation:
    """Between-process (sd of log values) and within-process (median CI half-width) spread."""
    logs = [math.log(v) for v in used_values(side, outliers, name)]
    between = None
    if len(logs) >= 2:
        m = sum(logs) / len(logs)
        between = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))
    within_vals = [w for w in side.within if math.isfinite(w)]
    return Variation(between, median(within_vals) if within_vals else None)


def repetitions_needed(var_log: float, margin: float, alpha: float, paired: bool = False,
                       power: float = POWER) -> int:
    """Repetitions per side (rounds, when paired) for a change of ``margin`` to be found with
    probability ``power`` at level ``alpha``, and for a CI around no change to fit inside the
    margin, given the variance of one repetition's log value ``var_log`` (Kalibera & Jones: the
    repetitions a wanted precision needs, from the variance measured at that level)."""
    from scipy import stats

    delta = math.log1p(margin)
    if var_log <= 0:
        return 2
    n = 2
    for _ in range(50):
        df = n - 1 if paired else 2 * n - 2
        q = float(stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df))
        k = 1 if paired else 2
        want = max(2, math.ceil(k * var_log * q * q / (delta * delta)))
        if want == n or want > MAX_NEEDED:
            return min(want, MAX_NEEDED)
        n = want
    return min(n, MAX_NEEDED)


def fastest_sample(value: float, samples: Sequence[float] | None, lower_is_better: bool = True) -> float | None:
    """A process's fastest sample of a timing whose ``value`` is the median of its ``samples`` (a
    timer's measurement); None for any other timing (a total or a rate over a whole run, whose
    samples are its parts: it is compared by its own value).

    What a comparison compares per process (:mod:`d5pipe.results.timing_compare`): the noise of a
    shared machine only ever adds time, so the fastest sample moves least with it (Chen & Revels,
    "Robust benchmarking in noisy environments", 2016). Measured on this VM
    (benchmarks/bench_process_statistic.py; README, "Reproducing and comparing runs"): between
    processes a level-0 timing's median spread by 6-11% in a busy hour and its fastest sample by
    4-9%; in a quiet hour 2-4% and 0.5-3%."""
    got = [float(x) for x in samples or () if isinstance(x, (int, float)) and math.isfinite(x)]
    if not got or not math.isfinite(value) or value <= 0:
        return None
    if abs(median(got) - value) > 1e-9 * abs(value):
        return None
    best = min(got) if lower_is_better else max(got)
    return best if best > 0 else None


def follow_sign(x: Sequence[float], y: Sequence[float]) -> float | None:
    """+1 when positive values ``y`` are a constant multiple of ``x``, -1 when they are a constant
    over ``x``, None when neither (:func:`derived_timings`' test, on one side's values)."""
    return _follow_sign([math.log(v) for v in x], [math.log(v) for v in y])


def derived_timings(values: dict[str, Sequence[float]]) -> dict[str, str]:
    """metric -> the timing it follows: across the repetitions of one side, its log values are a
    constant plus or minus another timing's (a rate from a time, GFLOP/s from seconds), so its test
    is that timing's. The first of each such group (in ``values``' order) is the one tested."""
    out: dict[str, str] = {}
    names = list(values)
    logs = {n: [math.log(v) if math.isfinite(v) and v > 0 else math.nan for v in values[n]] for n in names}
    for i, name in enumerate(names):
        if name in out:
            continue
        for other in names[i + 1:]:
            if other in out or len(logs[other]) != len(logs[name]) or len(logs[name]) < 2:
                continue
            if _follow_sign(logs[name], logs[other]) is not None:
                out[other] = name
    return out


def _follow_sign(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Of log values: the sign with which ``y`` is ``x`` plus a constant, None when it is not."""
    if any(math.isnan(v) for v in (*x, *y)):
        return None
    for sign in (1.0, -1.0):
        d = [b - sign * a for a, b in zip(x, y)]
        spread = max(d) - min(d)
        scale = max(abs(max(x) - min(x)), 1e-12)
        if spread <= 1e-6 * max(1.0, scale) and (max(x) - min(x)) > 0:
            return sign
    return None


def planned_looks(start: int, max_repetitions: int) -> int:
    """Looks of the until-decided mode when each round at most doubles the repetitions from
    ``start`` up to ``max_repetitions``: the first comparison and one per doubling."""
    looks, n = 1, max(2, start)
    while n < max_repetitions:
        n, looks = min(max_repetitions, 2 * n), looks + 1
    return looks
