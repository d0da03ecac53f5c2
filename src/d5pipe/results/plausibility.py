"""Plausibility checks: results that are impossible (a hard failure) or suspicious (a warning).

Each finding is one row of the tidy results, attached to the point it concerns: metric
``plausibility:<name>``, ``status`` ok, the evidence in ``error`` (a sentence) and, where there is
one, the number in ``value`` (with its CI). At most one row per point and cause.

Hard -- kind ``verdict``, text ``fail``, so the point's verdict is ``fail`` (d5pipe.results.verdicts):

* ``superlinear_speedup``: a level-3 point whose speedup over its 1-rank base exceeds its rank
  count beyond the speedup's 95% CI (``speedup_ci_low > ranks``; for weak scaling the scaled
  speedup, i.e. parallel efficiency ``> 1`` beyond its CI). Speedup, efficiency and their CIs come
  from :func:`d5pipe.levels.level3.scaling.scaling_table`. On one node this points at a broken
  base case, a timer that misses work, or ranks that did less work than claimed.

Soft -- kind ``info``, text ``warn``; they never change a verdict:

* ``oversubscribed``: metric ``oversubscribed`` is 1 (more ranks x threads than cores);
* ``shared_host``: metric ``shared_host`` is 1: the point's "nodes" are one machine (one kernel
  boot ID; the ranks' CPU sets may overlap), as on the SLURM sandbox: scaling across them
  measures contention on that machine, not a cluster;
* ``target_missed``: metric ``target_met`` is 0 (the timer stopped before its CI target);
* ``high_variation``: a time's IQR / median exceeds
  :data:`d5pipe.measure.stats.HIGH_VARIATION_IQR_RATIO` (10%), from the ``*iqr`` row its
  summary wrote next to it;
* ``several_environments``: the points of one stage (one table of the report) come from more
  than one environment (``env_hash``);
* ``above_bound``: a ``pct_peak_*`` or ``pct_of_bound`` above 100% beyond its CI (the CI of the rate it is a percentage
  of): the measured peak did not bound this point (a slow reference kernel in that precision, a
  working set in cache against a main-memory copy), so the percentage means nothing; said, never
  a silent number.
* ``outlier_repetition``: a repetition whose time is more than
  :data:`d5pipe.results.timing_compare.OUTLIER_K` robust spreads and
  :data:`~d5pipe.results.timing_compare.OUTLIER_MIN_FACTOR` times away from its sibling
  repetitions' median (the same rule that leaves it out of every comparison, which says so).

Only failures are written for the hard check: a point without a ``superlinear_speedup`` row was
either not checkable or plausible; passing a plausibility check is not evidence of correctness,
so it never turns an ``unchecked`` point into a ``pass``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from d5pipe.measure.stats import HIGH_VARIATION_IQR_RATIO
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.columns import METRIC_COLUMNS, stage_axes
from d5pipe.results.repetition_values import Side, find_outliers
from d5pipe.results.report.units import TIME_UNITS, quantity

PREFIX = "plausibility:"
HARD: frozenset[str] = frozenset({"superlinear_speedup"})
DESCRIPTIONS: dict[str, str] = {
    "superlinear_speedup": "speedup above the rank count beyond its 95% CI (parallel efficiency > 1): "
                           "a hard failure, the point fails",
    "oversubscribed": "more ranks x threads than cores: timings include time-slicing",
    "shared_host": "the point's nodes share one host: scaling across them measures contention, not a cluster",
    "target_missed": "the timer stopped (budget or sample cap) before its CI target",
    "high_variation": f"IQR above {HIGH_VARIATION_IQR_RATIO:.0%} of the median",
    "several_environments": "the points of one table come from more than one environment",
    "above_bound": "a % of the measured peak above 100% beyond its CI: that peak does not bound the point",
    "outlier_repetition": "a repetition far from its siblings: left out of every comparison, which names it",
}
"""What each check means, for the report."""

IQR_OF: dict[str, str] = {"time": "iqr", "time_per_step_s": "step_iqr", "collective_time_s": "coll_iqr"}
"""IQR rows named by a summary prefix (d5pipe.measure.stats.Summary.to_metrics); else ``<metric>_iqr``."""


@dataclass(frozen=True)
class Finding:
    stage: str
    point_id: str
    name: str
    detail: str
    value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "ok") & ~df["metric"].astype(str).str.startswith(PREFIX)]


FLAGS: tuple[tuple[str, str, float, str], ...] = (
    ("oversubscribed", "oversubscribed", 1.0, "oversubscribed = 1: more ranks x threads than cores"),
    ("shared_host", "shared_host", 1.0, "shared_host = 1: the nodes report one kernel boot ID (one machine); "
                                        "the scaling figures measure contention on it, not a cluster"),
    ("target_missed", "target_met", 0.0, "target_met = 0: the timer stopped before reaching its CI target"),
)
"""``(finding, metric, value, detail)``: a point whose ``metric`` is ``value`` is flagged, saying ``detail``."""


def flagged(df: pd.DataFrame) -> list[Finding]:
    """Every point a metric of :data:`FLAGS` flags, in their order."""
    rows = _ok(df)
    out: list[Finding] = []
    for name, metric, value, detail in FLAGS:
        hit = rows[(rows["metric"] == metric) & (rows["value"] == value)]
        out += [Finding(s, p, name, detail, value)
                for s, p in dict.fromkeys(zip(hit["stage"].astype(str), hit["point_id"].astype(str)))]
    return out


def high_variation(df: pd.DataFrame, threshold: float = HIGH_VARIATION_IQR_RATIO) -> list[Finding]:
    """Times whose IQR (the ``*iqr`` row of the same point) exceeds ``threshold`` x the median.

    Vectorised (merges, no loop over points): the aggregate job runs it on every results table.
    """
    rows = _ok(df)
    timing = rows[(rows["kind"] == "timing") & rows["unit"].isin(list(TIME_UNITS)) & rows["value"].notna()
                  & (rows["value"] != 0)][["stage", "point_id", "metric", "value"]].astype({"metric": str})
    if timing.empty:
        return []
    iqr = rows[["stage", "point_id", "metric", "value"]].astype({"metric": str}).rename(
        columns={"metric": "iqr_metric", "value": "iqr"})
    best = pd.concat([timing.assign(iqr_metric=candidate).merge(iqr, on=["stage", "point_id", "iqr_metric"])
                      for candidate in (timing["metric"].map(IQR_OF), timing["metric"] + "_iqr")],  # the prefix first
                     ignore_index=True).drop_duplicates(["stage", "point_id", "metric"])
    best = best.assign(ratio=best["iqr"].astype(float) / best["value"].astype(float).abs())
    high = best[best["ratio"] > threshold].sort_values(["stage", "point_id", "metric"])
    high = high.assign(part=[f"{m}: IQR is {r:.1%} of the median" for m, r in zip(high["metric"], high["ratio"])])
    return [Finding(str(stage), str(pid), "high_variation", "; ".join(g["part"]), float(g["ratio"].max()))
            for (stage, pid), g in high.groupby(["stage", "point_id"], sort=False)]


def several_environments(df: pd.DataFrame) -> list[Finding]:
    """Every ok point of a stage whose points come from more than one ``env_hash``."""
    rows = _ok(df)
    out: list[Finding] = []
    for stage, group in rows.groupby("stage", sort=True):
        distinct = sorted(h for h in group["env_hash"].dropna().astype(str).unique() if h)
        if len(distinct) < 2:
            continue
        for pid, env in group.drop_duplicates("point_id")[["point_id", "env_hash"]].itertuples(index=False):
            out.append(Finding(str(stage), str(pid), "several_environments",
                               f"{stage} has results from {len(distinct)} environments "
                               f"({', '.join(distinct)}); this point: {env}", float(len(distinct))))
    return out


def superlinear_speedup(df: pd.DataFrame) -> list[Finding]:
    """Points of a parallel level (``parallel_axis`` of d5pipe.levels.stage.Level) whose
    efficiency's CI lies entirely above 1: a speedup beyond the worker count beyond its CI. The
    speedup and efficiency rows are the level's derived ones (d5pipe.results.run_results)."""
    from d5pipe.levels.registry import LEVELS

    rows = _ok(df)
    out: list[Finding] = []
    for level in LEVELS:
        axis = level.parallel_axis
        mine = rows[rows["stage"] == level.name] if axis and axis in rows.columns else rows.iloc[:0]
        eff = mine[(mine["metric"] == "efficiency") & (mine["ci_low"].astype(float) > 1.0)]
        if eff.empty:
            continue
        speed = mine[mine["metric"] == "speedup"].drop_duplicates("point_id").set_index("point_id")
        times = mine[mine["kind"] == "timing"]
        for rec in eff.drop_duplicates("point_id").to_dict(orient="records"):
            pid, n = str(rec["point_id"]), int(rec[axis])
            if n <= 1 or pid not in speed.index:
                continue
            s = speed.loc[pid]
            lo, hi, value = float(s["ci_low"]), float(s["ci_high"]), float(s["value"])
            own = times[(times["point_id"] == pid) & ~times["metric"].isin(["speedup", "efficiency"])]
            took = f"; {own.iloc[0]['metric']} {quantity(float(own.iloc[0]['value']), 's')} on {n}" if len(own) else ""
            detail = (f"speedup {value:.3g} (95% CI [{lo:.3g}, {hi:.3g}]) on {n} exceeds the ideal {n} beyond its CI; "
                      f"efficiency {float(rec['value']):.3g} (CI low {float(rec['ci_low']):.3g} > 1){took}; "
                      f"base case: the point with {axis}=1")
            out.append(Finding(str(rec["stage"]), pid, "superlinear_speedup", detail, value, lo, hi))
    return out


PCT_RATE: tuple[tuple[str, str], ...] = (("pct_peak_flops", "gflops"), ("pct_peak_bw", "gbps"),
                                         ("pct_of_bound", "gflops"), ("pct_of_bound", "gbps"))
"""A percentage of a ceiling and the rate it is computed from (same suffix: ``_inference`` ...);
``pct_of_bound`` is of the FLOP rate, or of the bandwidth for a point without FLOPs."""


def above_bound(df: pd.DataFrame) -> list[Finding]:
    """``pct_peak_*`` rows above 100% beyond the CI of their rate (value x rate_ci_low / rate)."""
    rows = _ok(df)
    pct = rows[rows["metric"].astype(str).str.startswith(("pct_peak", "pct_of_bound"))
               & (rows["value"].astype(float) > 100.0)]
    if pct.empty:
        return []
    rates = rows.set_index(["stage", "point_id", "metric"])[["value", "ci_low"]]
    out: list[Finding] = []
    for stage, pid, metric, value in zip(pct["stage"].astype(str), pct["point_id"].astype(str),
                                         pct["metric"].astype(str), pct["value"].astype(float)):
        low = value
        for prefix, rate in PCT_RATE:
            if metric.startswith(prefix):
                key = (stage, pid, rate + metric[len(prefix):])
                if key in rates.index:
                    r = rates.loc[key]
                    r = r.iloc[0] if isinstance(r, pd.DataFrame) else r
                    if pd.notna(r["ci_low"]) and float(r["value"]) > 0:
                        low = value * float(r["ci_low"]) / float(r["value"])
                        break  # the first rate the point has (gflops before gbps)
        if low > 100.0:
            out.append(Finding(stage, pid, "above_bound",
                               f"{metric} = {value:.0f}% (lower CI bound {low:.0f}%): faster than the measured "
                               "peak it is a percentage of, so that peak is not an upper bound here", value, low))
    return out


def outlier_repetitions(df: pd.DataFrame) -> list[Finding]:
    """Repetitions of a configuration whose time is far from their siblings' (module docstring)."""
    rows = _ok(df)
    if REPEAT_AXIS not in rows.columns:
        return []
    timing = rows[(rows["kind"] == "timing") & rows["unit"].isin(list(TIME_UNITS)) & rows["value"].notna()]
    if timing.empty:
        return []
    axes = [a for a in stage_axes(timing) if a != REPEAT_AXIS]
    keys = [timing["stage"], timing["metric"], *[timing[a].astype(str) for a in axes]]
    out: list[Finding] = []
    for _, group in timing.groupby(keys, sort=False):
        if len(group) < 3:
            continue
        reps = group[REPEAT_AXIS].fillna(0).astype(int).tolist()
        side = Side.of(group["value"].astype(float).tolist(), reps)
        for o in find_outliers(side, "A"):
            hit = group[group[REPEAT_AXIS].fillna(0).astype(int) == o.repetition].iloc[0]
            unit = str(hit["unit"])
            med = o.value / o.factor
            out.append(Finding(str(hit["stage"]), str(hit["point_id"]), "outlier_repetition",
                               f"{hit['metric']}: repetition {o.repetition} took {quantity(o.value, unit)}, "
                               f"{o.factor:,.3g}x its {len(group) - 1} siblings' median ({quantity(med, unit)})",
                               o.factor))
    return out


def findings(df: pd.DataFrame) -> list[Finding]:
    """Every plausibility finding of ``df`` (hard first)."""
    return [*superlinear_speedup(df), *flagged(df), *high_variation(df), *several_environments(df),
            *above_bound(df), *outlier_repetitions(df)]


def plausibility_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ``plausibility:<name>`` rows for ``df`` (columns of ``df``; empty when nothing is found)."""
    base = df[~df["metric"].astype(str).str.startswith(PREFIX)]
    found = findings(base) if not base.empty else []
    columns = list(df.columns)
    if not found:
        return pd.DataFrame(columns=columns)
    point_cols = [c for c in df.columns if c not in METRIC_COLUMNS and c != "verdict"]
    points = base.drop_duplicates(["stage", "point_id"])[point_cols]
    frame = pd.DataFrame([{"stage": f.stage, "point_id": f.point_id, "name": f.name, "value": f.value,
                           "ci_low": f.ci_low, "ci_high": f.ci_high, "error": f.detail} for f in found])
    frame = frame.drop_duplicates(["stage", "point_id", "name"])  # one row per point and cause
    hard = frame["name"].isin(list(HARD))
    frame = frame.assign(metric=PREFIX + frame["name"], text=hard.map({True: "fail", False: "warn"}),
                         kind=hard.map({True: "verdict", False: "info"}), unit="", status="ok")
    out = frame.drop(columns="name").merge(points, on=["stage", "point_id"], how="left")
    return out.reindex(columns=columns)


def with_plausibility(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without earlier plausibility rows, plus the current ones (re-evaluated, never kept)."""
    df = df[~df["metric"].astype(str).str.startswith(PREFIX)]
    rows = plausibility_rows(df)
    if rows.empty:
        return df.reset_index(drop=True)
    rows = rows.astype({c: t for c, t in df.dtypes.items() if c in rows}, errors="ignore")
    return pd.concat([df, rows], ignore_index=True)
