"""Fair side-by-side comparisons within one run: each variant against a declared baseline.

Deep500's fairness rule: two points are compared only when they differ in exactly the compared
factor -- every other sweep axis of the stage has the same value (missing equals missing). Each
level declares its factors, their baselines and the time metrics compared (``factors`` of its
``stage.py``; :data:`FACTORS`). Today:

* L0 ``operators.impl`` against ``eager``, on ``time``; ``operators.framework`` against
  ``torch``, on ``time``, with each side's ``err_l2``; and ``operators.op``: a user operator against
  the built-in it names in ``compare_to`` (:attr:`Factor.baseline_metric`), on ``time``, with ``err_l2``;
* L1 ``level1.impl`` against ``eager``, on ``inference_latency`` and ``fwd_bwd_time``; and
  ``level1.runtime`` against ``torch`` (PyTorch eager), on ``inference_latency``;
* L2 ``train.optimizer`` against the first value of its sweep (``sgd`` when that is unknown),
  on ``step_time``;
* L3 ``distributed.backend`` against ``ddp``, on ``time_per_step_s`` and ``collective_time_s``.

For each pair and metric, across the **repetitions** of each side (config ``repetitions``: each
point measured in that many separate processes, in a random order within each repetition), by
the one comparison model (:mod:`d5pipe.results.timing_compare`; every pair of the run in one
family, Holm's correction over them):

* **speedup** = geometric mean of the baseline's repetition values / that of the variant's (each
  repetition's value is its fastest sample when both sides' timings are timer medians with their
  samples, else its value): above 1 the variant is faster, with its 95% CI;
* a **verdict**: ``faster`` / ``slower`` (changed), ``equivalent`` (the whole CI within the
  margin, ``report.margin``) or ``inconclusive`` (with the repetitions per side that would decide);
* with one repetition on a side: ``not compared`` (one process per side): the samples of one
  process miss the variation between processes, so they cannot tell a variant from noise. The
  speedup of the two medians is shown, without CI, test or verdict.

A point whose verdict is ``fail`` (d5pipe.results.verdicts: a failed correctness, acceptance,
plausibility or level-2 sanity check) is never ranked: a pair with a failing side keeps its two
medians but has no speedup, CI or test, its verdict is ``not compared`` and ``note`` names the
failure (``variant failed: check sanity:not_diverged failed (...)``). Every pair carries both
points' verdicts and, where the level has one (:attr:`Factor.quality`), the quality outcome of
both sides (level 2: final ``test_accuracy``; level 3: ``final_loss``), so speed is never read
without what it bought.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd

from d5pipe.levels.registry import factors
from d5pipe.levels.stage import Factor
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.collect import SampleSource
from d5pipe.results.columns import stage_axes
from d5pipe.results.repetition_values import Side, fastest_sample, geometric_mean
from d5pipe.results.timing_compare import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    Item,
    Policy,
    TimingComparison,
    compare_family,
    lower_is_better,
)

NOT_COMPARED = "not compared"
VERDICTS = ("faster", "slower", "inconclusive", "equivalent", NOT_COMPARED)


VERIFICATION_AXES: tuple[str, ...] = ("train.reference_optimizer", "train.reference_steps",
                                      "train.reference_tolerance", "model.reference")
"""Axes that say how a point is *checked*, not what it measures: a reference is a property of the
variant, so a user optimizer zipped with its own reference (``train.reference_optimizer``) is still
paired with the built-ins, which have none."""


FACTORS: tuple[tuple[str, Factor], ...] = tuple(factors())
"""``(stage, factor)`` of every level's compared factors (each level's ``stage.py`` declares them)."""


@dataclass(frozen=True)
class Pair:
    """One variant against the baseline, on one metric, with everything else equal."""

    stage: str
    factor: str
    metric: str
    unit: str
    baseline: str
    variant: str
    context: str
    """The other axes' values, ``name=value, ...`` (empty when nothing else varies)."""
    baseline_point: str
    variant_point: str
    baseline_median: float
    variant_median: float
    n_baseline: int
    n_variant: int
    speedup: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    method: str
    baseline_verdict: str = ""
    """The points' verdicts (pass / fail / unchecked; empty when the results have none)."""
    variant_verdict: str = ""
    quality_metric: str = ""
    baseline_quality: float = math.nan
    variant_quality: float = math.nan
    note: str = ""
    """Why a pair is ``not compared`` (the failing side and its reason), outliers left out."""
    needed: float = math.nan
    """Inconclusive: repetitions per side that would decide a change of the margin's size."""
    margin: float = DEFAULT_MARGIN
    variation_baseline: float = math.nan
    """Between-process spread of each side: the standard deviation of the log repetition values."""
    variation_variant: float = math.nan


def alpha_of(config: dict[str, Any]) -> float:
    """``report.alpha`` of config.yaml (default 0.05)."""
    report = config.get("report")
    value = report.get("alpha") if isinstance(report, dict) else None
    return float(value) if isinstance(value, (int, float)) and 0 < float(value) < 1 else DEFAULT_ALPHA


def policy_of(config: dict[str, Any], looks: int = 1) -> Policy:
    """The comparison policy of a run: ``report.alpha`` and ``report.margin`` (a fraction), and the
    looks of the until-decided mode when it added repetitions (``RunDir.looks``)."""
    report = config.get("report")
    margin = report.get("margin") if isinstance(report, dict) else None
    m = float(margin) if isinstance(margin, (int, float)) and float(margin) > 0 else DEFAULT_MARGIN
    return Policy(alpha=alpha_of(config), margin=m, looks=looks)


def _swept_values(config: dict[str, Any], column: str) -> list[str]:
    sweep = config.get("sweep")
    if not isinstance(sweep, dict):
        return []
    for group in [sweep.get("grid"), *(sweep.get("zip") or [])]:  # the grid first, then each zip group
        if isinstance(group, dict) and isinstance(group.get(column), list):
            return [_key(v) for v in group[column]]
    return []


def baseline_of(factor: Factor, present: Sequence[str], config: dict[str, Any]) -> str | None:
    """The baseline value of ``factor`` if any point has it, else None."""
    if factor.baseline is not None:
        return factor.baseline if factor.baseline in present else None
    first = next(iter(_swept_values(config, factor.column)), None)
    if first is not None and first in present:
        return first
    return factor.fallback if factor.fallback in present else None


def _key(v: Any) -> str:
    """An axis value as text: missing -> "", an integral float without ``.0`` (``64``, not ``64.0``)."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


@dataclass(frozen=True)
class _Raw:
    """A pair before the run's family of comparisons is decided."""

    pair: Pair
    item: Item | None
    """None: not ranked (a side failed a check)."""


def _fastest(rows: pd.DataFrame, samples: SampleSource | None, stage: str, metric: str, unit: str) -> list[float] | None:
    """Each row's process's fastest sample (:func:`fastest_sample`), or None unless every row has one."""
    if samples is None:
        return None
    lower = lower_is_better(unit, metric)
    out = []
    for pid, value in zip(rows["point_id"], rows["value"].astype(float)):
        best = fastest_sample(float(value), samples(stage, str(pid), metric), lower)
        if best is None:
            return None
        out.append(best)
    return out


def _side(rows: pd.DataFrame, fastest: list[float] | None = None) -> Side:
    """A side's repetition values (rows of one metric, or their processes' ``fastest`` samples), in
    repetition order."""
    reps = rows[REPEAT_AXIS].fillna(0).astype(int).tolist() if REPEAT_AXIS in rows.columns else list(range(len(rows)))
    order = sorted(range(len(rows)), key=lambda i: reps[i])
    values = fastest if fastest is not None else rows["value"].astype(float).tolist()
    return Side.of([values[i] for i in order], [reps[i] for i in order], fastest=fastest is not None)


def factor_pairs(df: pd.DataFrame, stage: str, factor: Factor, config: dict[str, Any],
                 verdicts: pd.DataFrame | None = None, samples: SampleSource | None = None) -> list[_Raw]:
    """Every fair (baseline, variant) pair of ``factor`` in ``df`` (tidy results), per metric,
    undecided; the repetitions of a configuration (axis ``repeat``) are one side of a pair."""
    rows = df[(df["stage"] == stage) & (df["status"] == "ok")]
    if rows.empty or factor.column not in rows.columns:
        return []
    rows = rows[rows[factor.column].notna()]
    present = sorted({_key(v) for v in rows[factor.column]})  # a numeric axis reads "4", not "4.0"
    named = _named_baselines(rows, factor.baseline_metric)
    base_value = None if factor.baseline_metric else baseline_of(factor, present, config)
    if (base_value is None and not named) or len(present) < 2:
        return []
    others = [a for a in stage_axes(rows) if a not in (factor.column, REPEAT_AXIS, *VERIFICATION_AXES)]
    points = rows.drop_duplicates("point_id")
    varying = [a for a in others if points[a].map(_key).nunique() > 1]
    out: list[_Raw] = []
    timed = rows[rows["metric"].isin(list(factor.metrics)) & rows["value"].notna()]
    judged = verdicts_by_point(df, stage, verdicts)
    quality = _quality(rows, factor.quality)
    for _, group in points.groupby([points[a].map(_key) for a in others] if others else
                                   [pd.Series("", index=points.index)], sort=False):
        by_value: dict[str, list[str]] = {}
        for _, r in group.iterrows():
            by_value.setdefault(_key(r[factor.column]), []).append(str(r["point_id"]))
        for variant, vpoints in sorted(by_value.items()):
            own = named.get(vpoints[0], "") if factor.baseline_metric else base_value
            base = by_value.get(own) if own else None
            if base is None or variant == own:
                continue
            first = group[group["point_id"] == base[0]].iloc[0]
            context = ", ".join(f"{a}={_key(first[a])}" for a in varying)
            for metric in factor.metrics:
                b = timed[timed["point_id"].isin(base) & (timed["metric"] == metric)]
                v = timed[timed["point_id"].isin(vpoints) & (timed["metric"] == metric)]
                if b.empty or v.empty:
                    continue
                (bv, br), (vv, vr) = _side_verdict(judged, base), _side_verdict(judged, vpoints)
                note = "; ".join(f"{side} failed: {reason or 'verdict fail'}" for side, verdict, reason in
                                 (("baseline", bv, br), ("variant", vv, vr)) if verdict == "fail")
                first_b, first_v = b.iloc[0], v.iloc[0]
                pair = Pair(
                    stage=stage, factor=factor.column, metric=metric, unit=_key(first_b["unit"]),
                    baseline=str(own), variant=variant, context=context,
                    baseline_point=str(first_b["point_id"]), variant_point=str(first_v["point_id"]),
                    baseline_median=geometric_mean(b["value"].astype(float).tolist()) or math.nan,
                    variant_median=geometric_mean(v["value"].astype(float).tolist()) or math.nan,
                    n_baseline=len(b), n_variant=len(v),
                    speedup=math.nan, ci_low=math.nan, ci_high=math.nan, p_value=math.nan,
                    verdict=NOT_COMPARED, method="", baseline_verdict=bv, variant_verdict=vv,
                    quality_metric=factor.quality, baseline_quality=_mean(quality, base),
                    variant_quality=_mean(quality, vpoints), note=note)
                fb, fv = (_fastest(b, samples, stage, metric, pair.unit), _fastest(v, samples, stage, metric, pair.unit))
                both = fb is not None and fv is not None
                item = None if note else Item(metric, pair.unit, _side(b, fb if both else None),
                                              _side(v, fv if both else None))
                out.append(_Raw(pair, item))
    return out


def _named_baselines(rows: pd.DataFrame, metric: str) -> dict[str, str]:
    """Point -> the baseline it names in ``metric`` (:attr:`Factor.baseline_metric`); empty without one."""
    if not metric:
        return {}
    named = rows[(rows["metric"] == metric)]
    column = "text" if "text" in named.columns else "value"
    return {str(p): _key(v) for p, v in zip(named["point_id"], named[column]) if _key(v)}


def _side_verdict(outcome: dict[str, tuple[str, str]], points: list[str]) -> tuple[str, str]:
    """A side's verdict over its repetitions: ``fail`` (with the first reason) if any failed."""
    seen = [outcome.get(p, ("", "")) for p in points]
    return next((o for o in seen if o[0] == "fail"), seen[0] if seen else ("", ""))


def _mean(values: dict[str, float], points: list[str]) -> float:
    got = [values[p] for p in points if p in values]
    return float(sum(got) / len(got)) if got else math.nan


CHECK_COLUMNS = frozenset({"stage", "point_id", "metric", "value", "text", "kind", "status", "error"})


def verdicts_by_point(df: pd.DataFrame, stage: str, verdicts: pd.DataFrame | None = None) -> dict[str, tuple[str, str]]:
    """point_id -> (verdict, reason) of ``stage``'s points: from ``verdicts`` (the run's point
    verdicts, d5pipe.results.verdicts) when given, else computed from ``df``'s checks; from the
    ``verdict`` column alone (no reason) when ``df`` lacks the check columns; else empty."""
    from d5pipe.results.verdicts import point_verdicts

    rows = df[df["stage"] == stage]
    if verdicts is not None or CHECK_COLUMNS <= set(rows.columns):
        pv = verdicts[verdicts["stage"] == stage] if verdicts is not None else point_verdicts(rows)
        return {str(p): (str(v), str(r)) for p, v, r in zip(pv["point_id"], pv["verdict"], pv["reason"])}
    if "verdict" in rows.columns:
        first = rows.drop_duplicates("point_id")
        return {str(p): (str(v), "") for p, v in zip(first["point_id"], first["verdict"]) if isinstance(v, str)}
    return {}


def _quality(rows: pd.DataFrame, metric: str) -> dict[str, float]:
    """point_id -> the value of ``metric`` (the factor's quality outcome)."""
    if not metric:
        return {}
    hit = rows[(rows["metric"] == metric) & rows["value"].notna()].drop_duplicates("point_id")
    return {str(p): float(v) for p, v in zip(hit["point_id"], hit["value"])}


def _decided(pair: Pair, t: TimingComparison) -> Pair:
    """A pair with its comparison: speedup = baseline / variant for times (variant / baseline
    for rates), its CI, the verdict in the words of a side-by-side table."""
    invert = t.lower_is_better
    speedup = math.nan if t.ratio is None else (1 / t.ratio if invert else t.ratio)
    lo = hi = math.nan
    if t.ci is not None:
        lo, hi = (1 / t.ci[1], 1 / t.ci[0]) if invert else t.ci
    verdict = {"changed": "faster" if speedup > 1 else "slower", "equivalent": "equivalent",
               "inconclusive": "inconclusive"}.get(t.verdict, NOT_COMPARED)
    note = pair.note
    if t.verdict == "not_compared":
        note = t.reason
    elif t.outliers:
        note = "left out: " + ", ".join(o.text(pair.unit) for o in t.outliers)
    per = " (each process's fastest sample)" if t.a.fastest else ""
    method = (f"{t.test} over {pair.n_baseline}/{pair.n_variant} repetitions{per}; {1 - t.alpha:.1%} CI; "
              f"Holm-adjusted p {t.p_adjusted:.2g} vs alpha {t.alpha:g}; equivalent within x{1 + t.margin:g}"
              if t.p_adjusted is not None else f"not compared: {t.reason}")
    va, vb = t.variation
    return replace(pair, baseline_median=t.value_a or math.nan, variant_median=t.value_b or math.nan,
                   speedup=speedup, ci_low=lo, ci_high=hi,
                   p_value=math.nan if t.p_value is None else t.p_value, verdict=verdict, method=method,
                   note=note, needed=math.nan if t.needed is None else float(t.needed), margin=t.margin,
                   variation_baseline=math.nan if va.between is None else va.between,
                   variation_variant=math.nan if vb.between is None else vb.between)


def comparisons(df: pd.DataFrame, samples: SampleSource | None = None,
                config: dict[str, Any] | None = None, stage: str | None = None,
                verdicts: pd.DataFrame | None = None, looks: int = 1) -> pd.DataFrame:
    """All pairs of :data:`FACTORS` (of ``stage`` only, when given) as a DataFrame (Pair fields),
    decided as one family; ``verdicts``: the run's point verdicts, when computed already."""
    config = config or {}
    raws = [r for s, f in FACTORS if stage is None or s == stage for r in factor_pairs(df, s, f, config, verdicts, samples)]
    ranked = [r for r in raws if r.item is not None]
    decided = dict(zip((id(r) for r in ranked),
                       compare_family([r.item for r in ranked if r.item is not None], policy_of(config, looks))))
    # a pair not decided had a side that failed a check: its speed is no result, not even its ratio is shown
    pairs = [replace(r.pair, method="not compared: a side failed a check") if (t := decided.get(id(r))) is None
             else _decided(r.pair, t) for r in raws]
    return pd.DataFrame([asdict(p) for p in pairs], columns=list(Pair.__dataclass_fields__))
