"""The one comparison model: a timing of two sides, each measured in several processes.

Every consumer -- ``d5pipe compare``, ``d5pipe reproduce``, ``d5pipe ab`` and the side-by-side
tables of a run -- compares timings here and nowhere else.

**What a side is.** The values of one timing metric in each repetition of one configuration
(config ``repetitions``: separate processes, later in time), one value per process: its fastest
sample when the timing is a timer's median of samples
(:func:`~d5pipe.results.repetition_values.fastest_sample`; a shared machine's noise only adds
time, so the fastest sample moves least with it: Chen & Revels 2016), else its value (a whole
run's time, a rate over it). A timing that follows another (GFLOP/s of a time) is moved with it.
The samples of one process do not hold the variation between processes, so they never enter the
test as samples; they give each repetition's within-process spread, reported beside the
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
from d5pipe.results.repetition_values import (
    MAX_NEEDED,
    OUTLIER_K,
    Outlier,
    Side,
    Variation,
    find_outliers,
    finite_list,
    geometric_mean,
    repetitions_needed,
    used_values,
    variation,
)
from d5pipe.results.timing_tests import Correction, LogValues, TestResult, adjust, family_prior, t_test

Verdict = Literal["changed", "equivalent", "inconclusive", "not_compared"]
VERDICTS: tuple[Verdict, ...] = ("changed", "inconclusive", "equivalent", "not_compared")
"""In the order a reader needs them: what moved, what is undecided, what is shown the same."""

DEFAULT_ALPHA = compare_defaults.ALPHA
DEFAULT_MARGIN = compare_defaults.MARGIN
"""Equivalence margin: a factor 1 + margin either way (d5pipe.measure.compare_defaults)."""
DEFAULT_CORRECTION: Correction = compare_defaults.CORRECTION
DEFAULT_RUN_NOISE = compare_defaults.RUN_NOISE
"""How much a whole run shifts (sd of log time): what two runs measured apart add (``--run-noise``)."""


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
    looks: int = 1
    """How many times the same comparison may be decided as repetitions are added (the until-decided
    mode): each look tests at ``alpha / looks`` and uses a ``1 - alpha / looks`` CI (Bonferroni over
    the planned looks), so stopping at the first decision keeps an A/A comparison at ``alpha``."""

    @property
    def level(self) -> float:
        """The alpha of one look."""
        return self.alpha / max(1, self.looks)

    @property
    def confidence(self) -> float:
        """The confidence of the CIs a verdict rests on (95% for one look at alpha 0.05)."""
        return 1.0 - self.level


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
    """CI of the ratio (95% for one look at alpha 0.05, :attr:`Policy.confidence`)."""
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
        parts.append(f"{self.test} over {n}" + (" (each process's fastest sample)" if self.a.fastest else ""))
        if self.verdict == "equivalent":
            parts.append(f"CI within x{1 + self.margin:g}")
        if self.verdict == "inconclusive" and self.needed is not None:
            about = ">" if self.needed >= MAX_NEEDED else "~"
            parts.append(f"{about}{self.needed} repetitions per side would decide a {self.margin:.0%} change")
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
            "value_a": self.value_a, "value_b": self.value_b, "a": finite_list(self.a.values),
            "b": finite_list(self.b.values), "repetitions_a": list(self.a.repetitions),
            "repetitions_b": list(self.b.repetitions), "needed": self.needed, "test": self.test,
            "outliers": [{"side": o.side, "repetition": o.repetition, "value": o.value, "factor": o.factor}
                         for o in self.outliers],
            "variation": [{"between": v.between, "within": v.within} for v in self.variation],
            "derived_from": self.derived_from, "reason": self.reason, "text": self.text(),
        }


def _raw(metric: str, unit: str, a: Side, b: Side, policy: Policy, paired: bool,
         lower: bool | None) -> tuple[TimingComparison, LogValues | None]:
    """A comparison before the family's test: outliers and the log values to test."""
    lower = lower_is_better(unit, metric) if lower is None else lower
    base = TimingComparison(metric, unit, a, b, "not_compared", alpha=policy.level, margin=policy.margin,
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
        skip = {o.repetition for o in outliers}  # a round with an outlier on either side
        pb = dict(zip(b.repetitions, b.values))
        pairs = [(x, pb[r]) for r, x in zip(a.repetitions, a.values) if r in pb and r not in skip and x > 0 and pb[r] > 0]
        va, vb = [p[0] for p in pairs], [p[1] for p in pairs]
    if len(va) < 2 or len(vb) < 2:
        gm_a, gm_b = geometric_mean(va), geometric_mean(vb)
        why = (f"one process per side ({len(va)} vs {len(vb)} repetitions; set repetitions >= 2)"
               if va and vb else "no values")
        return replace(base, ratio=gm_b / gm_a if gm_a and gm_b else None, reason=why), None
    return base, LogValues([math.log(v) for v in va], [math.log(v) for v in vb])


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
    tests: dict[int, TestResult] = {i: t_test(lg, paired, prior) for i, (_, lg) in enumerate(raws) if lg is not None}
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
        half = float(stats.t.ppf(0.5 + policy.confidence / 2, t.df)) * t.se if t.se > 0 else 0.0
        c = replace(c, ratio=math.exp(t.diff), ci=(math.exp(t.diff - half), math.exp(t.diff + half)),
                    p_value=t.p, p_adjusted=pa, test=t.name, derived_from=items[i].derived_from)
        out.append(_decide(c, t, policy, paired, family))
    return out


def _decide(c: TimingComparison, t: TestResult, policy: Policy, paired: bool, family: int) -> TimingComparison:
    assert c.ci is not None and c.p_adjusted is not None
    lo, hi = c.ci
    excludes = lo > 1.0 or hi < 1.0
    if excludes and c.p_adjusted < policy.level:
        return replace(c, verdict="changed")
    bound = 1.0 + policy.margin
    if lo >= 1.0 / bound and hi <= bound:
        return replace(c, verdict="equivalent")
    level = policy.level / family if policy.correction != "none" else policy.level
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


