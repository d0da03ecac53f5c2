"""Steps in a series of runs: change points found by PELT (``ruptures``), each confirmed by a test
that takes the runs as the observations.

**A series** is one configuration's timing on one machine type (d5pipe.history.run_rows), one
value per run: its best repetition (d5pipe.history.check.run_logs), on a log scale (a step is a
ratio). Runs,
not repetitions, are the observations, so the noise between runs -- 10-20% between two identical
runs on a shared VM -- is the noise a step must stand out of.

**Candidates**: PELT with the l2 cost (a change in the mean of the log values; ruptures'
``KernelCPD`` with the linear kernel, which is that cost in compiled code), at least
:data:`MIN_RUNS` runs per segment, penalty ``PENALTY * sigma^2 * log(n)``, on the series with single
odd runs pulled in (:func:`tame`): this machine's run-to-run noise is heavy-tailed (most runs
within 1-2%, some whole runs 5-30% slow), so ``sigma`` is robust (successive differences) and
moderated by the family's (:class:`FamilyNoise`: the series checked together).

**Transients**: a short segment (fewer than :data:`TRANSIENT_RUNS` runs) whose neighbours either
side do not differ is a few slow runs that came back, not two steps; its edges are dropped.

**Confirmation**: each remaining candidate compares the runs of the two segments on either side,
on their raw log values, by two tests at ``alpha / 2`` each, divided again by the number of places
a step could have been put (Bonferroni over both tests and over the places: the candidate was
chosen as the best of them):

* a pooled t test (tails included; the family's residual variance as a floor, Smyth's moderated
  variance with :data:`PRIOR_DF` degrees of freedom): the power when the noise is near normal;
* Yuen's trimmed t test (20% trimmed means, Welch's degrees of freedom; scipy): a whole run 30-40%
  slow, common here, widens the pooled test's variance until a clear 10% step goes unconfirmed, and
  the trimmed means leave it out.

The step's ratio and CI are those of the test that confirmed it (the pooled one where both did). A
confirmed step smaller than ``threshold`` (:data:`DEFAULT_THRESHOLD`, 5%; asv's
``detect_regressions`` has the same kind of threshold) is not reported: a few slow runs at one end
of a series move its mean by 2-3% and pass a test on this machine, and that is not what a history
is asked. A confirmed step is a :class:`Step`; a candidate that is not confirmed makes the series
``inconclusive`` with the runs per side that would decide it, and a series with no candidate whose
noise hides a step of ``min_step`` says so too (``too noisy``), instead of calling it steady.

Measured on this machine's recorded noise (tests/test_history_steps.py, README "History"): what
fraction of +10% steps this finds at their run, and how few step-free series it flags.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from d5pipe.results.timing_tests import PRIOR_DF, Prior

MIN_RUNS = 2
"""Runs on each side of a step: a single run off its neighbours is not a step (it may be one slow run)."""
WINDOW = 5
CLIP = 2.5
TRANSIENT_RUNS = 6
"""A segment shorter than this whose neighbours agree is a transient, not a step (its edges are dropped)."""
PENALTY = 3.0
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_STEP = 0.10
DEFAULT_THRESHOLD = 0.05
"""Confirmed steps smaller than this are not reported (module docstring)."""
TRIM = 0.2
"""Of each side's runs, the share Yuen's test trims at either end."""
POWER_Z = 0.8416
"""z of 80% power, for the runs an inconclusive series would need."""

Status = Literal["steps", "steady", "inconclusive"]


@dataclass(frozen=True)
class Step:
    index: int
    """Position of the first run after the step in the series (0-based)."""
    ratio: float
    """After / before, geometric means of the runs on either side."""
    ci: tuple[float, float]
    p: float
    """Adjusted for the two tests and the places a step could have been (Bonferroni)."""
    runs_before: int
    runs_after: int


@dataclass(frozen=True)
class SeriesCheck:
    runs: int
    status: Status
    steps: tuple[Step, ...] = ()
    needed: int | None = None
    """Inconclusive: runs per side that would confirm (or rule out) a step of the size asked."""
    note: str = ""
    small: tuple[Step, ...] = ()
    """Confirmed steps under the threshold: not reported as steps, kept for the curious."""


def robust_var(y: Sequence[float] | np.ndarray) -> float:
    """Variance of one run's log value from the median absolute successive difference (a step
    moves one difference only): for normal noise median|d| = 0.954 sigma."""
    d = np.abs(np.diff(np.asarray(y, dtype=float)))
    return float((np.median(d) / 0.9539) ** 2) if len(d) else 0.0


def tame(y: np.ndarray, spread_var: float = 0.0) -> np.ndarray:
    """The series with single odd runs pulled in (for finding candidates only): each run's distance
    from the running median of its :data:`WINDOW` neighbours clipped to :data:`CLIP` robust
    spreads. A median filter keeps a step's edge, so a step stays a step, while one slow run among
    steady ones (whole processes 20-30% slow are common on a shared VM) no longer looks like one."""
    half = WINDOW // 2
    if len(y) <= half:
        return y
    padded = np.pad(y, half, mode="reflect")  # the ends mirrored, so an end run has neighbours too
    med = np.median(np.lib.stride_tricks.sliding_window_view(padded, WINDOW), axis=1)
    resid = y - med
    spread = max(1.4826 * float(np.median(np.abs(resid))), math.sqrt(spread_var))
    if spread <= 0:
        return y
    return med + np.clip(resid, -CLIP * spread, CLIP * spread)


@dataclass(frozen=True)
class FamilyNoise:
    """What the series checked together say about run-to-run noise: ``spread`` (robust: the
    median of their :func:`robust_var`), for finding candidates; ``var`` (the median variance of a
    run's log value around its segment's mean, tails included), the prior of the confirming test
    (Smyth's moderated variance, :data:`PRIOR_DF` degrees of freedom)."""

    spread: float = 0.0
    var: float = 0.0


def _moderate(var: float, df: int, prior: float) -> tuple[float, float]:
    """The comparison model's moderated variance (d5pipe.results.timing_tests.Prior), the
    family's ``prior`` a floor with :data:`PRIOR_DF` degrees of freedom."""
    return Prior(prior, PRIOR_DF).moderate(var, df)


def _segment_ss(y: np.ndarray, edges: Sequence[int]) -> float:
    """Sum of squares of the runs around their segment's mean, segments between ``edges``."""
    return sum(float(((y[a:b] - y[a:b].mean()) ** 2).sum()) for a, b in zip(edges, edges[1:]))


def _candidates(y: np.ndarray, spread: float) -> list[int]:
    """PELT over the l2 cost of the tamed series (ruptures' kernel form with the linear kernel is
    that cost, in compiled code)."""
    import ruptures

    n = len(y)
    t = tame(y, spread)
    var0, _ = _moderate(robust_var(t), n - 2, spread)
    if var0 <= 0:
        return [i for i in range(MIN_RUNS, n - MIN_RUNS + 1) if t[i] != t[i - 1]]
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_RUNS).fit(t.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=PENALTY * var0 * math.log(n)) if b < n]


def family_noise(series: Sequence[Sequence[float]]) -> FamilyNoise:
    """The family's noise (:class:`FamilyNoise`; none below three series of four runs)."""
    ys = [np.asarray(y, dtype=float) for y in series if len(y) >= 2 * MIN_RUNS]
    if len(ys) < 3:
        return FamilyNoise()
    spread = float(np.median([robust_var(y) for y in ys]))
    resid = []
    for y in ys:
        edges = [0, *_candidates(y, spread), len(y)]
        ss = _segment_ss(y, edges)
        if len(y) > len(edges) - 1:
            resid.append(ss / (len(y) - len(edges) + 1))
    return FamilyNoise(spread, float(np.median(resid)) if resid else 0.0)


@dataclass(frozen=True)
class _Test:
    diff: float
    se: float
    df: float
    p: float


def _test(left: np.ndarray, right: np.ndarray, prior: float) -> _Test:
    """Pooled t on the runs either side (their own variance, the family's as a floor)."""
    from scipy import stats

    ss = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
    df0 = len(left) + len(right) - 2
    var, df = _moderate(ss / df0 if df0 > 0 else 0.0, df0, prior)
    diff = float(right.mean() - left.mean())
    se = math.sqrt(var * (1 / len(left) + 1 / len(right))) if var > 0 and df > 0 else 0.0
    if se == 0.0:
        return _Test(diff, 0.0, max(df, 1.0), 0.0 if diff else 1.0)
    return _Test(diff, se, df, float(2 * stats.t.sf(abs(diff / se), df)))


def _merge_transients(y: np.ndarray, bkps: list[int], prior: float, alpha: float, places: int) -> list[int]:
    """Drop both edges of a short segment (fewer than :data:`TRANSIENT_RUNS` runs) whose neighbours
    either side do not differ: a few slow runs that came back are not a step."""
    n = len(y)
    while True:
        edges = [0, *bkps, n]
        for j in range(1, len(edges) - 2):
            a, b = edges[j], edges[j + 1]
            if b - a < TRANSIENT_RUNS and _test(y[edges[j - 1]:a], y[b:edges[j + 2]], prior).p * places >= alpha:
                bkps = [x for x in bkps if x not in (a, b)]
                break
        else:
            return bkps


def _confirm(left: np.ndarray, right: np.ndarray, at: int, prior: float, alpha: float, places: int) -> Step | None:
    """The step at ``at`` when the pooled or Yuen's trimmed t test confirms it (module docstring),
    with the confirming test's ratio and CI; None when neither does."""
    from scipy import stats

    level = alpha / 2 / places
    t = _test(left, right, prior)
    half = float(stats.t.ppf(1 - level / 2, t.df)) * t.se
    if t.p < level and abs(t.diff) > half:
        return Step(at, math.exp(t.diff), (math.exp(t.diff - half), math.exp(t.diff + half)),
                    min(1.0, 2 * places * t.p), len(left), len(right))
    if min(len(left), len(right)) < 2 or float(np.ptp(left)) == 0.0 == float(np.ptp(right)):
        return None
    with warnings.catch_warnings():  # near-identical runs: scipy warns of lost precision, p stays valid
        warnings.simplefilter("ignore", RuntimeWarning)
        yuen = stats.ttest_ind(right, left, equal_var=False, trim=TRIM)
    p = float(yuen.pvalue)
    if not p < level:  # NaN (no spread) included
        return None
    ci = yuen.confidence_interval(1 - level)
    diff = float(stats.trim_mean(right, TRIM) - stats.trim_mean(left, TRIM))
    return Step(at, math.exp(diff), (math.exp(float(ci.low)), math.exp(float(ci.high))),
                min(1.0, 2 * places * p), len(left), len(right))


def check_series(logs: Sequence[float], noise: FamilyNoise | None = None, alpha: float = DEFAULT_ALPHA,
                 min_step: float = DEFAULT_MIN_STEP, threshold: float = DEFAULT_THRESHOLD) -> SeriesCheck:
    """Steps in one series of runs' log values (module docstring)."""
    from scipy import stats

    noise = noise or FamilyNoise()
    y = np.asarray(logs, dtype=float)
    n = len(y)
    if n < 2 * MIN_RUNS:
        return SeriesCheck(n, "inconclusive", needed=MIN_RUNS,
                           note=f"{n} run(s): a step needs {MIN_RUNS} runs on each side")
    places = max(1, n - 2 * MIN_RUNS + 1)
    level = alpha / places
    bkps = _merge_transients(y, _candidates(y, noise.spread), noise.var, alpha, places)
    edges = [0, *bkps, n]
    steps: list[Step] = []
    small: list[Step] = []
    undecided: list[float] = []
    for k, b in enumerate(bkps):
        left, right = y[edges[k]:b], y[b:edges[k + 2]]
        step = _confirm(left, right, b, noise.var, alpha, places)
        if step is None:
            undecided.append(abs(float(right.mean() - left.mean())))
        elif abs(math.log(step.ratio)) < math.log1p(threshold):
            small.append(step)
        else:
            steps.append(step)
    var, _ = _moderate(_segment_ss(y, edges) / max(1, n - len(edges) + 1), n - len(edges) + 1, noise.var)
    sigma = math.sqrt(var)
    z = float(stats.norm.ppf(1 - level / 2)) + POWER_Z
    if undecided:
        size = max(min(undecided), math.log1p(min_step))
        need = math.ceil(2 * (z * sigma / size) ** 2)
        return SeriesCheck(n, "inconclusive", tuple(steps), need,
                           f"{len(undecided)} candidate step(s) not confirmed by the runs on either side",
                           tuple(small))
    if steps:
        return SeriesCheck(n, "steps", tuple(steps), small=tuple(small))
    detectable = z * sigma * 2 / math.sqrt(n)  # balanced halves
    if detectable > math.log1p(min_step):
        need = math.ceil(4 * (z * sigma / math.log1p(min_step)) ** 2)
        return SeriesCheck(n, "inconclusive", (), need,
                           f"too noisy to rule out a {min_step:.0%} step in {n} runs "
                           f"(run-to-run spread {math.expm1(sigma):.1%})", tuple(small))
    under = (f"{len(small)} confirmed step(s) under {threshold:.0%} not reported "
             f"({', '.join(f'x{st.ratio:.3f} at run {st.index + 1}' for st in small)})") if small else ""
    return SeriesCheck(n, "steady", note=under, small=tuple(small))
