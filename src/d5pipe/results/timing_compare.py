"""The one comparison model: a timing of two sides, each measured in several processes.

Every consumer -- ``d5pipe compare``, ``d5pipe reproduce``, ``d5pipe ab`` and the side-by-side
tables of a run -- compares timings here and nowhere else.

**What a side is.** The values of one timing metric in each repetition of one configuration
(config ``repetitions``: separate processes, later in time), one value per process (the median of
its samples). The samples of one process do not hold the variation between processes, so they
never enter the test; they give each repetition's within-process spread, reported beside the
between-process spread (Kalibera & Jones, ISMM 2013).

**The test.** Welch's t on the logarithms of the repetitions' values (paired t on the log ratios
of rounds when the two sides were interleaved round by round, :func:`compare_family` with
``paired=True``): the ratio B / A is the ratio of the geometric means, its 95% CI comes from the
same t distribution. Times and rates are the same test (a rate's log is a constant minus its
time's log).

**Three verdicts** (:data:`VERDICTS`):

* ``changed`` -- the CI excludes 1 *and* the test rejects "no change" at the family's level (Holm's
  step-down over every timing compared together, so an A/A comparison of many timings stays quiet
  as a whole); the direction says ``slower`` or ``faster``;
* ``equivalent`` -- not changed, and the whole CI lies within the margin, a factor ``1 + margin``
  either way (an equivalence test: the CI inside the margin, not a failed difference test);
* ``inconclusive`` -- neither. It says how many repetitions per side would decide a change of the
  margin's size (:func:`repetitions_needed`).

``not_compared`` is kept for what cannot be tested at all (fewer than two repetitions on a side).

**Outlier repetitions.** A repetition whose value is more than :data:`OUTLIER_K` robust spreads
(and more than :data:`OUTLIER_MIN_FACTOR` times) away from the median of its siblings is named
(:class:`Outlier`) and left out of the test; the comparison says so in its text, so a verdict never
rests silently on it, nor silently without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from d5pipe.measure import compare_defaults

Verdict = Literal["changed", "equivalent", "inconclusive", "not_compared"]
VERDICTS: tuple[Verdict, ...] = ("changed", "inconclusive", "equivalent", "not_compared")
"""In the order a reader needs them: what moved, what is undecided, what is shown the same."""
Correction = Literal["holm", "bh", "none"]

DEFAULT_ALPHA = compare_defaults.ALPHA
DEFAULT_MARGIN = compare_defaults.MARGIN
"""Equivalence margin: a factor 1 + margin either way (d5pipe.measure.compare_defaults)."""
DEFAULT_CORRECTION: Correction = "holm"
CONFIDENCE = 0.95
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

PRIOR_DF = 4.0
"""How many degrees of freedom the family's variance counts for in each timing's (Smyth's moderated
t, with a fixed prior weight): three repetitions alone leave Welch's test about two."""
PRIOR_MIN_TIMINGS = 3
"""A family of fewer timings gives no prior: each is tested on its own variance."""

TIME_UNITS = frozenset({"s", "ms", "us", "µs", "ns", "min", "h", "sec", "seconds"})


def lower_is_better(unit: str, metric: str = "") -> bool:
    """Whether a smaller value of a timing metric is better: times yes; rates (``x/s``), speedups
    and efficiencies (unit ``x`` or none) no."""
    u = unit.strip()
    if u in TIME_UNITS:
        return True
    if u.endswith("/s") or u.lower().endswith("per_s") or u.lower().endswith("/sec") or u == "x":
        return False
    return not (u == "" and metric.split(":")[-1] in ("speedup", "efficiency"))


@dataclass(frozen=True)
class Policy:
    """How a family of timings is judged (the CLI's ``--alpha``, ``--margin``, ``--correction``)."""

    alpha: float = DEFAULT_ALPHA
    margin: float = DEFAULT_MARGIN
    correction: Correction = DEFAULT_CORRECTION
    outlier_k: float = OUTLIER_K
    run_noise: float = 0.0
    """Standard deviation of a whole run's shift in log time on this machine: the variance two runs
    measured apart add to an unpaired comparison (``d5pipe compare``, ``reproduce``)."""

    def describe(self) -> str:
        corr = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no"}[self.correction]
        return (f"changed: 95% CI of the ratio excludes 1 and {corr} correction at alpha {self.alpha:g} rejects; "
                f"equivalent: the whole CI within x{1 + self.margin:g} either way")


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

    @staticmethod
    def of(values: Sequence[float], repetitions: Sequence[int] | None = None,
           within: Sequence[float] | None = None) -> Side:
        vals = tuple(float(v) for v in values)
        reps = tuple(int(r) for r in repetitions) if repetitions is not None else tuple(range(len(vals)))
        return Side(vals, reps, tuple(float(w) for w in within or ()))


@dataclass(frozen=True)
class Variation:
    """Where a side's variation arises: between its processes and within them."""

    between: float | None
    """Standard deviation of the log values across repetitions (~ relative spread); None below 2."""
    within: float | None
    """Median within-process relative CI half-width of the repetitions; None when unknown."""


@dataclass(frozen=True)
class TimingComparison:
    """One timing, A (reference, baseline) against B (candidate, variant)."""

    metric: str
    unit: str
    a: Side
    b: Side
    verdict: Verdict
    ratio: float | None = None
    """Geometric mean of B / of A over the repetitions used."""
    ci: tuple[float, float] | None = None
    """95% CI of the ratio."""
    p_value: float | None = None
    p_adjusted: float | None = None
    """``p_value`` after the family's correction (compared with ``alpha``)."""
    alpha: float = DEFAULT_ALPHA
    margin: float = DEFAULT_MARGIN
    lower_is_better: bool = True
    outliers: tuple[Outlier, ...] = ()
    needed: int | None = None
    """Repetitions per side that would decide a change of the margin's size (inconclusive only)."""
    test: str = ""
    reason: str = ""
    """Why a timing was not compared, or what a verdict rests on besides the test."""
    variation: tuple[Variation, Variation] = field(default=(Variation(None, None), Variation(None, None)))
    derived_from: str = ""
    """The timing this one is a constant multiple or reciprocal of (the same test, shown once)."""

    @property
    def direction(self) -> Literal["slower", "faster"] | None:
        """Of a ``changed`` timing, in terms of performance."""
        if self.verdict != "changed" or self.ratio is None or self.ratio == 1.0:
            return None
        return "slower" if (self.ratio > 1) == self.lower_is_better else "faster"

    @property
    def change(self) -> float | None:
        """Relative change of the metric's value, B / A - 1."""
        return None if self.ratio is None else self.ratio - 1.0

    @property
    def slowdown(self) -> float | None:
        """Relative loss of performance (positive: B is worse), whatever the metric's direction."""
        if self.ratio is None or self.ratio <= 0:
            return None
        return self.ratio - 1.0 if self.lower_is_better else 1.0 / self.ratio - 1.0

    @property
    def value_a(self) -> float | None:
        return geometric_mean(used_values(self.a, self.outliers, "A"))

    @property
    def value_b(self) -> float | None:
        return geometric_mean(used_values(self.b, self.outliers, "B"))

    def label(self) -> str:
        """``changed (slower)``, ``equivalent``, ``inconclusive``, ``not compared``."""
        return self.verdict.replace("_", " ") + (f" ({self.direction})" if self.direction else "")

    def text(self) -> str:
        """One line: ratio [CI], p, repetitions, the verdict's reason; outliers and what would decide."""
        n = f"{len(used_values(self.a, self.outliers, 'A'))}/{len(used_values(self.b, self.outliers, 'B'))} repetitions"
        if self.verdict == "not_compared" or self.ratio is None:
            return f"not compared: {self.reason}" if self.reason else "not compared"
        parts = [f"ratio {self.ratio:.3f}"]
        if self.ci is not None:
            parts[0] += f" [{self.ci[0]:.3f}, {self.ci[1]:.3f}]"
        if self.p_value is not None:
            p = f"p={self.p_value:.2g}"
            if self.p_adjusted is not None and self.p_adjusted != self.p_value:
                p += f" (adjusted {self.p_adjusted:.2g})"
            parts.append(p)
        parts.append(f"{self.test} over {n}")
        if self.verdict == "equivalent":
            parts.append(f"CI within x{1 + self.margin:g}")
        if self.verdict == "inconclusive" and self.needed is not None:
            parts.append(f"~{self.needed} repetitions per side would decide a {self.margin:.0%} change")
        if self.outliers:
            parts.append("left out: " + ", ".join(o.text(self.unit) for o in self.outliers))
        if self.reason:
            parts.append(self.reason)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "unit": self.unit, "verdict": self.verdict, "direction": self.direction,
            "ratio": self.ratio, "ci": list(self.ci) if self.ci else None, "p_value": self.p_value,
            "p_adjusted": self.p_adjusted, "alpha": self.alpha, "margin": self.margin,
            "value_a": self.value_a, "value_b": self.value_b, "a": _finite_list(self.a.values),
            "b": _finite_list(self.b.values), "repetitions_a": list(self.a.repetitions),
            "repetitions_b": list(self.b.repetitions), "needed": self.needed, "test": self.test,
            "outliers": [{"side": o.side, "repetition": o.repetition, "value": o.value, "factor": o.factor}
                         for o in self.outliers],
            "variation": [{"between": v.between, "within": v.within} for v in self.variation],
            "derived_from": self.derived_from, "reason": self.reason, "text": self.text(),
        }


def _finite_list(values: Sequence[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def geometric_mean(values: Sequence[float]) -> float | None:
    """Geometric mean of the positive, finite ``values`` (None when there are none)."""
    got = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in got) / len(got)) if got else None


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def find_outliers(side: Side, name: Literal["A", "B"], k: float = OUTLIER_K) -> tuple[Outlier, ...]:
    """Repetitions of ``side`` far from the median of their siblings (module docstring); needs at
    least three repetitions with a value (two cannot say which one is off)."""
    idx = [i for i, v in enumerate(side.values) if math.isfinite(v) and v > 0]
    if len(idx) < 3:
        return ()
    logs = {i: math.log(side.values[i]) for i in idx}
    out = []
    for i in idx:
        others = [logs[j] for j in idx if j != i]
        med = _median(others)
        spread = max(1.4826 * _median([abs(x - med) for x in others]), OUTLIER_SPREAD_FLOOR)
        dist = abs(logs[i] - med)
        if dist > k * spread and dist > math.log(OUTLIER_MIN_FACTOR):
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
    return Variation(between, _median(within_vals) if within_vals else None)


@dataclass(frozen=True)
class _Test:
    diff: float
    se: float
    df: float
    p: float
    var_pooled: float
    """Variance of one repetition's log value (of one round's log ratio, paired) used."""
    name: str


@dataclass(frozen=True)
class _Logs:
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
        """Smyth's moderated variance: the timing's own variance shrunk toward the family's."""
        if self.df <= 0:
            return var, float(df)
        return (self.df * self.var + df * var) / (self.df + df), self.df + df


def _t_test(logs: _Logs, paired: bool, prior: Prior) -> _Test:
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
        return _Test(diff, 0.0, df, 0.0 if diff != 0 else 1.0, pooled, name)
    p = float(2 * stats.t.sf(abs(diff / se), df))
    return _Test(diff, se, df, p, pooled, name)


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


def _raw(metric: str, unit: str, a: Side, b: Side, policy: Policy, paired: bool,
         lower: bool | None) -> tuple[TimingComparison, _Logs | None]:
    """A comparison before the family's test: outliers and the log values to test."""
    lower = lower_is_better(unit, metric) if lower is None else lower
    base = TimingComparison(metric, unit, a, b, "not_compared", alpha=policy.alpha, margin=policy.margin,
                            lower_is_better=lower)
    unreached = (sum(not math.isfinite(v) for v in a.values), sum(not math.isfinite(v) for v in b.values))
    if any(unreached):
        both = unreached == (len(a.values), len(b.values))
        return replace(base, verdict="equivalent" if both else "inconclusive",
                       reason=("not reached in any repetition of either side" if both else
                               f"not reached in {unreached[0]} of {len(a.values)} repetitions of A and "
                               f"{unreached[1]} of {len(b.values)} of B")), None
    outliers = find_outliers(a, "A", policy.outlier_k) + find_outliers(b, "B", policy.outlier_k)
    va, vb = used_values(a, outliers, "A"), used_values(b, outliers, "B")
    varis = (variation(a, outliers, "A"), variation(b, outliers, "B"))
    base = replace(base, outliers=outliers, variation=varis)
    if paired:
        skip_a = {o.repetition for o in outliers if o.side == "A"}
        skip_b = {o.repetition for o in outliers if o.side == "B"}
        pb = dict(zip(b.repetitions, b.values))
        pairs = [(x, pb[r]) for r, x in zip(a.repetitions, a.values)
                 if r in pb and r not in skip_a and r not in skip_b and x > 0 and pb[r] > 0]
        va, vb = [p[0] for p in pairs], [p[1] for p in pairs]
    if len(va) < 2 or len(vb) < 2:
        gm_a, gm_b = geometric_mean(va), geometric_mean(vb)
        why = (f"one process per side ({len(va)} vs {len(vb)} repetitions; set repetitions >= 2)"
               if va and vb else "no values")
        return replace(base, ratio=gm_b / gm_a if gm_a and gm_b else None, reason=why), None
    return base, _Logs([math.log(v) for v in va], [math.log(v) for v in vb])


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


@dataclass(frozen=True)
class Item:
    """One timing to compare within a family."""

    metric: str
    unit: str
    a: Side
    b: Side
    lower_is_better: bool | None = None
    """None: from the unit (:func:`lower_is_better`)."""
    derived_from: str = ""


def family_prior(logs: Sequence[_Logs], paired: bool, run_noise: float = 0.0) -> Prior:
    """The family's variance of one repetition (the median over its timings, :data:`PRIOR_DF`
    degrees of freedom) when it has at least :data:`PRIOR_MIN_TIMINGS` timings, else none."""
    variances = [v for item in logs for v, df in item.variances(paired) if df >= 1]
    run_var = 0.0 if paired else run_noise ** 2
    if len(logs) < PRIOR_MIN_TIMINGS or not variances:
        return Prior(run_var=run_var)
    return Prior(_median(variances), PRIOR_DF, run_var)


def compare_family(items: Sequence[Item], policy: Policy | None = None,
                   paired: bool = False) -> list[TimingComparison]:
    """Every timing of ``items`` compared (module docstring): each timing's variance moderated by
    the family's, the family's correction applied over those tested (derived timings, which
    repeat another's test, are not counted twice)."""
    from scipy import stats

    policy = policy or Policy()
    raws = [_raw(it.metric, it.unit, it.a, it.b, policy, paired, it.lower_is_better) for it in items]
    counted = [i for i, (_, lg) in enumerate(raws) if lg is not None and not items[i].derived_from]
    prior = family_prior([lg for i in counted if (lg := raws[i][1]) is not None], paired, policy.run_noise)
    tests: dict[int, _Test] = {i: _t_test(lg, paired, prior) for i, (_, lg) in enumerate(raws) if lg is not None}
    adjusted = adjust([tests[i].p for i in counted], policy.correction)
    p_adj: dict[int, float] = dict(zip(counted, adjusted))
    by_name = {(it.metric, id(it.a)): i for i, it in enumerate(items)}
    family = max(1, len(counted))
    out: list[TimingComparison] = []
    for i, (c, _) in enumerate(raws):
        t = tests.get(i)
        if t is None:
            out.append(replace(c, derived_from=items[i].derived_from))
            continue
        if i in p_adj:
            pa = p_adj[i]
        else:  # derived: takes the adjusted p of the timing it follows
            src = by_name.get((items[i].derived_from, id(items[i].a)))
            pa = p_adj.get(src, min(1.0, t.p * family)) if src is not None else min(1.0, t.p * family)
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, t.df)) * t.se if t.se > 0 else 0.0
        c = replace(c, ratio=math.exp(t.diff), ci=(math.exp(t.diff - half), math.exp(t.diff + half)),
                    p_value=t.p, p_adjusted=pa, test=t.name, derived_from=items[i].derived_from)
        out.append(_decide(c, t, policy, paired, family))
    return out


def _decide(c: TimingComparison, t: _Test, policy: Policy, paired: bool, family: int) -> TimingComparison:
    assert c.ci is not None and c.p_adjusted is not None
    lo, hi = c.ci
    excludes = lo > 1.0 or hi < 1.0
    if excludes and c.p_adjusted < policy.alpha:
        return replace(c, verdict="changed")
    bound = 1.0 + policy.margin
    if lo >= 1.0 / bound and hi <= bound:
        return replace(c, verdict="equivalent")
    level = policy.alpha / family if policy.correction != "none" else policy.alpha
    if not paired and 1.96 * math.sqrt(2) * policy.run_noise >= math.log1p(policy.margin):
        return replace(c, verdict="inconclusive", needed=None,
                       reason=f"two runs measured apart differ by ~{policy.run_noise:.0%} on this machine "
                              "(--run-noise): more repetitions cannot decide a change of the margin's size; "
                              "`d5pipe ab` measures both sides interleaved")
    need = repetitions_needed(t.var_pooled - (0.0 if paired else policy.run_noise ** 2), policy.margin, level,
                              paired)
    return replace(c, verdict="inconclusive", needed=need)


def compare_one(metric: str, unit: str, a: Sequence[float], b: Sequence[float],
                policy: Policy | None = None, paired: bool = False) -> TimingComparison:
    """One timing on its own (a family of one)."""
    return compare_family([Item(metric, unit, Side.of(a), Side.of(b))], policy, paired)[0]


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
            if _follows(logs[name], logs[other]):
                out[other] = name
    return out


def _follows(x: Sequence[float], y: Sequence[float]) -> bool:
    if any(math.isnan(v) for v in (*x, *y)):
        return False
    for sign in (1.0, -1.0):
        d = [b - sign * a for a, b in zip(x, y)]
        spread = max(d) - min(d)
        scale = max(abs(max(x) - min(x)), 1e-12)
        if spread <= 1e-6 * max(1.0, scale) and (max(x) - min(x)) > 0:
            return True
    return False
