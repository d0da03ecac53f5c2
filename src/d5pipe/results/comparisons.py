"""Fair side-by-side comparisons within one run: each variant against a declared baseline.

Deep500's fairness rule: two points are compared only when they differ in exactly the compared
factor -- every other sweep axis of the stage has the same value (missing equals missing). Per
level, the factor, its baseline and the time metrics compared (:data:`FACTORS`):

* L0 ``operators.impl`` against ``eager``, on ``time``;
* L1 ``level1.impl`` against ``eager``, on ``inference_latency`` and ``fwd_bwd_time``; and
  ``level1.runtime`` against ``torch`` (PyTorch eager), on ``inference_latency``;
* L2 ``train.optimizer`` against the first value of its sweep (``sgd`` when that is unknown),
  on ``step_time``;
* L3 ``distributed.backend`` against ``ddp``, on ``time_per_step_s`` and ``collective_time_s``.

A custom L0 operator against the built-in it re-implements is not compared: nothing in the config
or in an operator spec says which built-in a custom operator stands for.

For each pair and metric, across the **repetitions** of each side (config ``repetitions``: each
point measured in that many separate processes; d5pipe.results.repetitions):

* **speedup** = geometric mean of the baseline's repetition values / that of the variant's (each
  repetition's value is the median of its samples): above 1 the variant is faster;
* its **CI** and a **p-value** from one Welch t-test on the logarithms of the repetitions' values
  (level ``1 - report.alpha``, default 0.05);
* a **verdict** by one rule: ``faster`` / ``slower`` only when the CI of the speedup excludes 1
  *and* p < alpha, else ``no significant difference``;
* with one repetition on a side: ``not compared`` (one process per side): the samples of one
  process miss the variation between processes, so they cannot tell a variant from noise. The
  speedup of the two medians is shown, without CI, test or verdict.

:func:`compare_pair` (Price & Bonett's CI of a ratio of medians with a Mann-Whitney test, on the
raw samples of two processes) remains for within-process detail; no verdict rests on it.

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from d5pipe.measure.normality import binom_half_cdf
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.columns import axis_columns
from d5pipe.results.metric_compare import compare_samples, min_attainable_p
from d5pipe.results.repetitions import geometric_mean, ratio_test

SampleSource = Callable[[str, str, str], Sequence[float] | None]
"""(stage, point_id, metric) -> that metric's raw samples, or None."""
CONFIDENCE = 0.95
DEFAULT_ALPHA = 0.05
NOT_COMPARED = "not compared"
VERDICTS = ("faster", "slower", "no significant difference", "too few samples", NOT_COMPARED)


VERIFICATION_AXES: tuple[str, ...] = ("train.reference_optimizer", "train.reference_steps",
                                      "train.reference_tolerance", "model.reference")
"""Axes that say how a point is *checked*, not what it measures: a reference is a property of the
variant, so a user optimizer zipped with its own reference (``train.reference_optimizer``) is still
paired with the built-ins, which have none."""


@dataclass(frozen=True)
class Factor:
    """A compared factor of one level: its axis column, its baseline and the metrics compared."""

    stage: str
    column: str
    baseline: str | None
    """The declared baseline value; None: the first value of the sweep, else :attr:`fallback`."""
    metrics: tuple[str, ...]
    title: str
    fallback: str = ""
    quality: str = ""
    """The metric that says what the speed bought (shown for both sides); empty: none."""


FACTORS: tuple[Factor, ...] = (
    Factor("level0", "operators.impl", "eager", ("time",), "implementations"),
    Factor("level1", "level1.impl", "eager", ("inference_latency", "fwd_bwd_time"), "implementations"),
    Factor("level1", "level1.runtime", "torch", ("inference_latency",), "runtimes"),
    Factor("level2", "train.optimizer", None, ("step_time",), "optimizers", fallback="sgd", quality="test_accuracy"),
    Factor("level3", "distributed.backend", "ddp", ("time_per_step_s", "collective_time_s"), "backends",
           quality="final_loss"),
)


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
    """Why a pair is ``not compared`` (the failing side and its reason)."""


def alpha_of(config: dict[str, Any]) -> float:
    """``report.alpha`` of config.yaml (default 0.05)."""
    report = config.get("report")
    value = report.get("alpha") if isinstance(report, dict) else None
    return float(value) if isinstance(value, (int, float)) and 0 < float(value) < 1 else DEFAULT_ALPHA


def _swept_values(config: dict[str, Any], column: str) -> list[str]:
    sweep = config.get("sweep")
    if not isinstance(sweep, dict):
        return []
    grid = sweep.get("grid")
    if isinstance(grid, dict) and isinstance(grid.get(column), list):
        return [str(v) for v in grid[column]]
    for group in sweep.get("zip") or []:
        if isinstance(group, dict) and isinstance(group.get(column), list):
            return [str(v) for v in group[column]]
    return []


def baseline_of(factor: Factor, present: Sequence[str], config: dict[str, Any]) -> str | None:
    """The baseline value of ``factor`` if any point has it, else None."""
    if factor.baseline is not None:
        return factor.baseline if factor.baseline in present else None
    first = next(iter(_swept_values(config, factor.column)), None)
    if first is not None and first in present:
        return first
    return factor.fallback if factor.fallback in present else None


_NORMAL = NormalDist()


def log_median_se(samples: np.ndarray) -> float:
    """Price-Bonett standard error of ln(median) from two order statistics (module docstring)."""
    x = np.sort(np.log(samples))
    n = int(x.size)
    c = max(1, int(round((n + 1) / 2 - math.sqrt(n))))
    z_c = _NORMAL.inv_cdf(min(1.0 - 1e-12, 1.0 - float(binom_half_cdf(n)[c - 1])))
    return float((x[n - c] - x[c - 1]) / (2.0 * z_c)) if z_c > 0 else math.nan


def ratio_ci(baseline: Sequence[float], variant: Sequence[float],
             confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(median(baseline) / median(variant), CI low, CI high); positive samples, >= 2 per side."""
    b = np.asarray(baseline, dtype=float)
    v = np.asarray(variant, dtype=float)
    b, v = b[np.isfinite(b) & (b > 0)], v[np.isfinite(v) & (v > 0)]
    if b.size < 2 or v.size < 2:
        return math.nan, math.nan, math.nan
    d = math.log(float(np.median(b))) - math.log(float(np.median(v)))
    se = math.hypot(log_median_se(b), log_median_se(v))
    z = _NORMAL.inv_cdf(0.5 + confidence / 2.0)
    return math.exp(d), math.exp(d - z * se), math.exp(d + z * se)


def compare_pair(baseline: Sequence[float], variant: Sequence[float],
                 alpha: float = DEFAULT_ALPHA) -> tuple[float, float, float, float, str]:
    """(speedup, CI low, CI high, Mann-Whitney p, verdict) of two sets of raw times."""
    speedup, low, high = ratio_ci(baseline, variant)
    test = compare_samples(baseline, variant, alpha=alpha)
    if min_attainable_p(test.n_ref, test.n_new) >= alpha:
        verdict = "too few samples"
    elif test.p_value < alpha:
        verdict = "faster" if test.median_new < test.median_ref else "slower"
    else:
        verdict = "no significant difference"
    return speedup, low, high, test.p_value, verdict


def _key(v: Any) -> str:
    """An axis value as text: missing -> "", an integral float without ``.0`` (``64``, not ``64.0``)."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def stage_axes(rows: pd.DataFrame) -> list[str]:
    """Axis columns with a value for some row of ``rows`` (the fixed columns and ``verdict`` excluded)."""
    return [c for c in axis_columns(rows.columns) if rows[c].notna().any()]


def factor_pairs(df: pd.DataFrame, factor: Factor, samples: SampleSource | None,
                 config: dict[str, Any], verdicts: pd.DataFrame | None = None) -> list[Pair]:
    """Every fair (baseline, variant) pair of ``factor`` in ``df`` (tidy results), per metric; the
    repetitions of a configuration (axis ``repeat``) are one side of a pair."""
    rows = df[(df["stage"] == factor.stage) & (df["status"] == "ok")]
    if rows.empty or factor.column not in rows.columns:
        return []
    rows = rows[rows[factor.column].notna()]
    present = sorted({str(v) for v in rows[factor.column]})
    base_value = baseline_of(factor, present, config)
    if base_value is None or len(present) < 2:
        return []
    others = [a for a in stage_axes(rows) if a not in (factor.column, REPEAT_AXIS, *VERIFICATION_AXES)]
    points = rows.drop_duplicates("point_id")
    varying = [a for a in others if points[a].map(_key).nunique() > 1]
    alpha = alpha_of(config)
    out: list[Pair] = []
    timed = rows[rows["metric"].isin(list(factor.metrics)) & rows["value"].notna()]
    outcome = point_outcomes(df, factor.stage, verdicts)
    quality = _quality(rows, factor.quality)
    for _, group in points.groupby([points[a].map(_key) for a in others] if others else
                                   [pd.Series("", index=points.index)], sort=False):
        by_value: dict[str, list[str]] = {}
        for _, r in group.iterrows():
            by_value.setdefault(str(r[factor.column]), []).append(str(r["point_id"]))
        base = by_value.get(base_value)
        if base is None:
            continue
        first = group[group["point_id"] == base[0]].iloc[0]
        context = ", ".join(f"{a}={_key(first[a])}" for a in varying)
        for variant, vpoints in sorted(by_value.items()):
            if variant == base_value:
                continue
            for metric in factor.metrics:
                b = timed[timed["point_id"].isin(base) & (timed["metric"] == metric)]
                v = timed[timed["point_id"].isin(vpoints) & (timed["metric"] == metric)]
                if b.empty or v.empty:
                    continue
                (bv, br), (vv, vr) = _side_outcome(outcome, base), _side_outcome(outcome, vpoints)
                note = "; ".join(f"{side} failed: {reason or 'verdict fail'}" for side, verdict, reason in
                                 (("baseline", bv, br), ("variant", vv, vr)) if verdict == "fail")
                pair = _pair(factor, metric, base_value, variant, context, b, v, alpha, ranked=not note)
                out.append(replace(pair, baseline_verdict=bv, variant_verdict=vv, quality_metric=factor.quality,
                                   baseline_quality=_mean(quality, base), variant_quality=_mean(quality, vpoints),
                                   note=note or pair.note))
    return out


def _side_outcome(outcome: dict[str, tuple[str, str]], points: list[str]) -> tuple[str, str]:
    """A side's verdict over its repetitions: ``fail`` (with the first reason) if any failed."""
    seen = [outcome.get(p, ("", "")) for p in points]
    failed = [o for o in seen if o[0] == "fail"]
    if failed:
        return failed[0]
    return seen[0] if seen else ("", "")


def _mean(values: dict[str, float], points: list[str]) -> float:
    got = [values[p] for p in points if p in values]
    return float(sum(got) / len(got)) if got else math.nan


CHECK_COLUMNS = frozenset({"stage", "point_id", "metric", "value", "text", "kind", "status", "error"})


def point_outcomes(df: pd.DataFrame, stage: str, verdicts: pd.DataFrame | None = None) -> dict[str, tuple[str, str]]:
    """point_id -> (verdict, reason) of ``stage``'s points: from ``verdicts`` (the run's point
    verdicts, d5pipe.results.verdicts) when given, else computed from ``df``'s checks; from the
    ``verdict`` column alone (no reason) when ``df`` lacks the check columns; else empty."""
    from d5pipe.results.verdicts import point_verdicts

    rows = df[df["stage"] == stage]
    if verdicts is not None:
        pv = verdicts[verdicts["stage"] == stage]
        return {str(p): (str(v), str(r)) for p, v, r in zip(pv["point_id"], pv["verdict"], pv["reason"])}
    if CHECK_COLUMNS <= set(rows.columns):
        pv = point_verdicts(rows)
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


def _pair(factor: Factor, metric: str, base_value: str, variant: str, context: str, b: pd.DataFrame,
          v: pd.DataFrame, alpha: float, ranked: bool = True) -> Pair:
    """One pair from the repetitions' rows of each side (module docstring); ``ranked=False`` (a side
    failed a check): the speedup of the means only, verdict ``not compared``."""
    bvals = [float(x) for x in b["value"]]
    vvals = [float(x) for x in v["value"]]
    test = ratio_test(vvals, bvals, alpha)  # ratio = GM(baseline) / GM(variant): the speedup
    s = test.ratio if test.ratio is not None else math.nan
    lo = hi = p = math.nan
    reason = ""
    if not ranked:  # a failed side's speed is no result: not even its ratio is shown
        s, verdict, method = math.nan, NOT_COMPARED, "not compared: a side failed a check"
    elif test.reason:
        verdict, method, reason = NOT_COMPARED, f"not compared: {test.reason}", test.reason
    else:
        assert test.ci is not None and test.p_value is not None
        lo, hi, p = test.ci[0], test.ci[1], test.p_value
        verdict = ("faster" if s > 1 else "slower") if test.changed else "no significant difference"
        method = (f"Welch t-test on the logs of {len(bvals)} vs {len(vvals)} repetitions' medians; "
                  f"CI of the speedup at {1 - alpha:.0%}")
    gm_b, gm_v = geometric_mean(bvals) or math.nan, geometric_mean(vvals) or math.nan
    first_b, first_v = b.iloc[0], v.iloc[0]
    return Pair(
        stage=factor.stage, factor=factor.column, metric=metric, unit=_key(first_b["unit"]),
        baseline=base_value, variant=variant, context=context, baseline_point=str(first_b["point_id"]),
        variant_point=str(first_v["point_id"]), baseline_median=gm_b, variant_median=gm_v,
        n_baseline=len(bvals), n_variant=len(vvals), speedup=s, ci_low=lo, ci_high=hi, p_value=p,
        verdict=verdict, method=method, note=reason,
    )


def comparisons(df: pd.DataFrame, samples: SampleSource | None = None,
                config: dict[str, Any] | None = None, stage: str | None = None,
                verdicts: pd.DataFrame | None = None) -> pd.DataFrame:
    """All pairs of :data:`FACTORS` (of ``stage`` only, when given) as a DataFrame (Pair fields);
    ``verdicts``: the run's point verdicts, when computed already."""
    config = config or {}
    pairs = [p for f in FACTORS if stage is None or f.stage == stage
             for p in factor_pairs(df, f, samples, config, verdicts)]
    columns = list(Pair.__dataclass_fields__)
    return pd.DataFrame([asdict(p) for p in pairs], columns=columns)
