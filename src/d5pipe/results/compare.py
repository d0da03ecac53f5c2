"""``d5pipe compare A B``: the points two runs share, side by side, each metric's change and significance.

Also the loader both ``compare`` and ``reproduce`` use: :func:`load_points` reads ``results.parquet``
(one row per point and metric) and attaches each metric's raw samples from the point records
(``points/<stage>/<point_id>.json``: ``metrics[].samples`` names a key of ``samples``).

Points are matched by their stage and sweep parameters (the ``repeat`` axis aside), not by their
IDs, so two configs of one experiment compare point by point. Non-timing metrics are compared
repetition by repetition (:mod:`d5pipe.results.metric_compare`); a timing is compared across the
repetitions of each side (:mod:`d5pipe.results.repetitions`: Welch's test on the repetitions'
values, CI of the ratio, one rule, Bonferroni over the timings compared), and with one process
per side it is not compared.

A *regression* (``--fail-on-regression PCT``) is a timing metric whose change is statistically
significant and worse by more than PCT percent: an increase for times (unit s, ms, ...), a
decrease for rates (unit ``.../s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from d5pipe.core.canonical import canonical_json
from d5pipe.core.errors import D5PipeError
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.collect import metric_samples
from d5pipe.results.columns import axis_columns, is_missing, load_results
from d5pipe.results.metric_compare import (
    ComparePolicy,
    Comparison,
    MetricValue,
    compare_metric,
    higher_is_worse,
)
from d5pipe.results.repetitions import family_alpha, geometric_mean, ratio_test
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, read_record

STATUS_METRIC = "status"


@dataclass
class PointData:
    """Everything one run says about one point."""

    stage: str
    point_id: str
    status: str
    error: str | None
    seed: int | None
    params: dict[str, Any]
    metrics: dict[str, MetricValue] = field(default_factory=dict)


@dataclass
class PointComparison:
    stage: str
    point_id: str
    params: dict[str, Any]
    comparisons: list[Comparison]


@dataclass
class RunComparison:
    points: list[PointComparison]
    only_ref: list[tuple[str, str]]
    only_new: list[tuple[str, str]]


def _opt_float(v: Any) -> float | None:
    return None if is_missing(v) else float(v)


def _plain(v: Any) -> Any:
    if is_missing(v):
        return None
    return v.item() if hasattr(v, "item") else v


def _record_samples(run_dir: Path, stage: str, point_id: str,
                    cache: dict[tuple[str, str], dict[str, list[float]]]) -> dict[str, list[float]]:
    """The point's raw samples per metric (d5pipe.results.collect.metric_samples), its record read once."""
    key = (stage, point_id)
    if key not in cache:
        path = RunDir.of(run_dir).record(stage, point_id)
        try:
            cache[key] = metric_samples(read_record(path)) if path.is_file() else {}
        except CorruptRecord as exc:
            raise D5PipeError(str(exc)) from exc
    return cache[key]


def load_points(run_dir: Path) -> dict[tuple[str, str], PointData]:
    """(stage, point_id) -> PointData, from ``results.parquet`` and the point records."""
    run_dir = Path(run_dir)
    df = load_results(run_dir)
    axis_cols = axis_columns(df.columns)
    # plausibility rows are derived from this run's timings (which are compared themselves) and
    # from this machine's noise: never a metric of their own to reproduce
    df = df[~df["metric"].astype(str).str.startswith("plausibility:")]
    records: dict[tuple[str, str], dict[str, list[float]]] = {}
    points: dict[tuple[str, str], PointData] = {}
    for row in df.to_dict(orient="records"):
        key = (str(row["stage"]), str(row["point_id"]))
        point = points.get(key)
        if point is None:
            seed = row.get("seed")
            point = PointData(
                stage=key[0], point_id=key[1], status=str(row["status"]),
                error=None if is_missing(row.get("error")) else str(row.get("error")),
                seed=None if is_missing(seed) else int(seed),
                params={c: _plain(row[c]) for c in axis_cols if not is_missing(row[c])},
            )
            points[key] = point
        name = str(row["metric"])
        if name == STATUS_METRIC:  # the placeholder row of a failed/skipped/metric-less point
            continue
        kind = "numerical" if is_missing(row.get("kind")) else str(row["kind"])
        value: float | str | None = _opt_float(row["value"])
        text = row.get("text")
        has_text = not is_missing(text) and str(text) != ""
        if has_text and (value is None or kind == "verdict"):
            # A verdict is its text ("pass"/"fail"); an acceptance row's value is the metric it judged,
            # compared (with its own kind) under that metric's name.
            value = str(text)
        samples = None
        if kind == "timing":
            raw = _record_samples(run_dir, key[0], key[1], records).get(name)
            samples = tuple(raw) if raw else None
        point.metrics[name] = MetricValue(
            value=value, unit="" if is_missing(row.get("unit")) else str(row["unit"]), kind=kind,
            ci_low=_opt_float(row.get("ci_low")), ci_high=_opt_float(row.get("ci_high")), samples=samples,
        )
    return points


def compare_point(ref: PointData, new: PointData, policy: ComparePolicy, check_seeds: bool = False,
                  timings: bool = True) -> list[Comparison]:
    """All comparisons of one point: status, optionally seed, then each metric of the reference
    (``timings=False``: the timing metrics left out, for :func:`compare_loaded` to compare across
    repetitions)."""
    out: list[Comparison] = []
    same_status = ref.status == new.status
    out.append(Comparison(
        metric="status", kind="verdict", verdict="reproduced" if same_status else "not_reproduced",
        reference=ref.status, candidate=new.status,
        detail="" if same_status else f"{ref.status} -> {new.status}{f' ({new.error})' if new.error else ''}",
    ))
    if check_seeds:
        same_seed = ref.seed == new.seed
        out.append(Comparison(
            metric="seed", kind="deterministic", verdict="reproduced" if same_seed else "not_reproduced",
            reference=None if ref.seed is None else str(ref.seed), candidate=None if new.seed is None else str(new.seed),
            detail="" if same_seed else "the re-run used a different seed",
        ))
    for name, ref_metric in ref.metrics.items():
        if not timings and ref_metric.kind == "timing":
            continue
        new_metric = new.metrics.get(name)
        if new_metric is None:
            out.append(Comparison(metric=name, kind=ref_metric.kind, verdict="not_reproduced",
                                  reference=ref_metric.value, candidate=None, unit=ref_metric.unit,
                                  detail="metric missing in the candidate run"))
        else:
            out.append(compare_metric(name, ref_metric, new_metric, policy))
    for name, new_metric in new.metrics.items():
        if name not in ref.metrics and (timings or new_metric.kind != "timing"):
            out.append(Comparison(metric=name, kind=new_metric.kind, verdict="not_compared", reference=None,
                                  candidate=new_metric.value, unit=new_metric.unit,
                                  detail="metric only in the candidate run"))
    return out


GroupKey = tuple[str, str]
"""(stage, canonical JSON of the point's parameters without ``repeat``)."""


def _groups(points: dict[tuple[str, str], PointData]) -> dict[GroupKey, dict[int, PointData]]:
    """The repetitions of each configuration: (stage, parameters) -> repetition index -> point."""
    out: dict[GroupKey, dict[int, PointData]] = {}
    for (stage, _pid), point in points.items():
        params = {k: v for k, v in point.params.items() if k != REPEAT_AXIS}
        rep = int(point.params.get(REPEAT_AXIS, 0) or 0)
        out.setdefault((stage, canonical_json(params)), {})[rep] = point
    return out


def _timing_values(reps: dict[int, PointData], name: str) -> list[float]:
    """The metric's value in each repetition that ran (``ok``) and has it."""
    out = []
    for point in reps.values():
        m = point.metrics.get(name)
        if point.status == "ok" and m is not None and isinstance(m.value, (int, float)):
            out.append(float(m.value))
    return out


def _timing_names(reps: dict[int, PointData]) -> dict[str, MetricValue]:
    names: dict[str, MetricValue] = {}
    for point in reps.values():
        for name, m in point.metrics.items():
            if m.kind == "timing":
                names.setdefault(name, m)
    return names


def compare_timing(name: str, unit: str, ref: list[float], new: list[float], alpha: float,
                   policy: ComparePolicy) -> Comparison:
    """One timing across the repetitions of both sides (d5pipe.results.repetitions).

    A repetition whose value is NaN did not reach it (``time_to_target_s`` of a training that never
    reached the target): said as such, and never turned into a change of the others' values."""
    unreached = (sum(not math.isfinite(v) for v in ref), sum(not math.isfinite(v) for v in new))
    if any(unreached):
        same = unreached == (len(ref), len(new))
        return Comparison(
            metric=name, kind="timing", verdict="reproduced" if same else "not_compared",
            reference=geometric_mean(ref), candidate=geometric_mean(new), unit=unit,
            detail=(f"not reached in {unreached[0]} of {len(ref)} repetitions of A and {unreached[1]} of "
                    f"{len(new)} of B" + ("" if same else "; not compared")),
            extra={"n_ref": len(ref), "n_new": len(new), "not_reached_ref": unreached[0],
                   "not_reached_new": unreached[1]})
    t = ratio_test(ref, new, alpha)
    gm_ref = geometric_mean(ref)
    gm_new = geometric_mean(new)
    if t.reason:
        return Comparison(metric=name, kind="timing", verdict="not_compared", reference=gm_ref, candidate=gm_new,
                          unit=unit, rel_change=None if t.ratio is None else t.ratio - 1.0,
                          detail=f"not compared: {t.reason}", extra={"n_ref": t.n_ref, "n_new": t.n_new})
    assert t.ratio is not None and t.ci is not None and t.p_value is not None
    rel = t.ratio - 1.0
    changed = t.changed and abs(rel) >= policy.min_rel_change
    direction: Literal["higher", "lower"] | None = ("higher" if rel > 0 else "lower") if changed else None
    detail = (f"{gm_ref:.6g} -> {gm_new:.6g} {unit}: ratio {t.ratio:.3f} [{t.ci[0]:.3f}, {t.ci[1]:.3f}], "
              f"Welch p={t.p_value:.3g} (alpha {alpha:.3g} for this comparison) over {t.n_ref}/{t.n_new} "
              f"repetitions; {'changed' if changed else 'no significant difference'}")
    return Comparison(metric=name, kind="timing", verdict="changed" if changed else "reproduced",
                      reference=gm_ref, candidate=gm_new, unit=unit, rel_change=rel, direction=direction,
                      p_value=t.p_value, ci_overlap=None, detail=detail,
                      extra={"n_ref": t.n_ref, "n_new": t.n_new, "ratio_ci": list(t.ci), "test": "welch_log",
                             "alpha": alpha})


def compare_loaded(ref: dict[tuple[str, str], PointData], new: dict[tuple[str, str], PointData],
                   policy: ComparePolicy, check_seeds: bool = False) -> RunComparison:
    """Match points by (stage, parameters); compare each repetition pair, and each timing across
    the repetitions (see module docstring)."""
    ga, gb = _groups(ref), _groups(new)
    shared = sorted(k for k in ga if k in gb)
    testable = sum(1 for k in shared for name in _timing_names(ga[k])
                   if len(_timing_values(ga[k], name)) >= 2 and len(_timing_values(gb[k], name)) >= 2)
    alpha = family_alpha(policy.alpha, testable)
    points = []
    for key in shared:
        reps_a, reps_b = ga[key], gb[key]
        first = reps_a[min(reps_a)]
        common = sorted(set(reps_a) & set(reps_b))
        comps: list[Comparison] = []
        for r in common:
            for c in compare_point(reps_a[r], reps_b[r], policy, check_seeds, timings=False):
                comps.append(c if r == 0 else replace(c, metric=f"{c.metric} [repeat {r}]"))
        for name, m in _timing_names(reps_a).items():
            comps.append(compare_timing(name, m.unit, _timing_values(reps_a, name), _timing_values(reps_b, name),
                                        alpha, policy))
        params = {k: v for k, v in first.params.items() if k != REPEAT_AXIS}
        points.append(PointComparison(key[0], first.point_id, params, comps))
    return RunComparison(
        points=sorted(points, key=lambda p: (p.stage, p.point_id)),
        only_ref=sorted((p.stage, p.point_id) for k, reps in ga.items() for r, p in reps.items()
                        if r not in gb.get(k, {})),
        only_new=sorted((p.stage, p.point_id) for k, reps in gb.items() for r, p in reps.items()
                        if r not in ga.get(k, {})),
    )


def compare_runs(a: Path, b: Path, policy: ComparePolicy | None = None, allow_different: bool = False,
                 labels: tuple[str, str] | None = None) -> RunComparison:
    """Compare run directory B (candidate) against run directory A (reference); ``d5pipe compare``
    opens bundle archives into directories first (d5pipe.provenance.bundle.opened_bundle) and
    names them by ``labels`` in errors.

    Runs of two different experiments share no point by design: that is a one-line error unless
    ``allow_different``.
    """
    policy = policy or ComparePolicy()
    ea, eb = RunDir.of(a).require_run().experiment, RunDir.of(b).require_run().experiment
    if ea != eb and not allow_different:
        la, lb = labels or (str(a), str(b))
        raise D5PipeError(f"compare: {la} is experiment '{ea}', {lb} is '{eb}'; they share no point "
                          "(use --allow-different to compare them anyway)")
    return compare_loaded(load_points(Path(a)), load_points(Path(b)), policy)


def regressions(result: RunComparison, pct: float) -> list[tuple[PointComparison, Comparison]]:
    """Significant timing changes that are worse than ``pct`` percent (see module docstring)."""
    found = []
    for point in result.points:
        for c in point.comparisons:
            if c.kind != "timing" or c.verdict != "changed" or c.rel_change is None:
                continue
            worse = c.rel_change if higher_is_worse(c.unit) else -c.rel_change
            if worse > pct / 100.0:
                found.append((point, c))
    return found


WIDTH = 120
"""``format_table`` lines are at most this many characters."""
_COLUMNS: tuple[tuple[str, int], ...] = (("metric", 26), ("A", 17), ("B", 17), ("change", 9), ("p", 8))
_ID_WIDTH = 40


def _cell(v: Any, unit: str = "") -> str:
    """A value with a readable unit (``49.83 µs``, ``1.5 MiB``); ``-`` when missing."""
    from d5pipe.results.report.units import quantity

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} {unit}".strip()  # counts and seeds: every digit
    if isinstance(v, float):
        return quantity(v, unit)
    return str(v)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _short_id(point_id: str) -> str:
    """Long point IDs keep their start and their hash suffix: ``size128-dtype…269d17adb774``."""
    return point_id if len(point_id) <= _ID_WIDTH else point_id[: _ID_WIDTH - 13] + "…" + point_id[-12:]


def _p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def format_table(result: RunComparison) -> str:
    """Plain text, at most :data:`WIDTH` columns: one heading line per shared point (stage, point ID,
    parameters), then one line per metric with A, B (with units), change, p and verdict. Info
    metrics and unchanged status lines are left out."""
    from d5pipe.results.report.units import natural_key

    head = " ".join(name.ljust(w) for name, w in _COLUMNS) + " verdict"
    lines = [_fit("  " + head, WIDTH)]
    for p in sorted(result.points, key=lambda p: (natural_key(p.stage), natural_key(p.point_id))):
        shown = [c for c in p.comparisons
                 if c.kind != "info" and not (c.metric == "status" and c.verdict == "reproduced")]
        if not shown:
            continue
        params = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(p.params.items()))
        lines.append(_fit(f"{p.stage} {_short_id(p.point_id)}" + (f"  ({params})" if params else ""), WIDTH))
        for c in shown:
            change = "-" if c.rel_change is None else f"{c.rel_change:+.1%}"
            verdict = c.verdict if c.direction is None else f"{c.verdict} ({c.direction})"
            cells = (c.metric, _cell(c.reference, c.unit), _cell(c.candidate, c.unit), change, _p(c.p_value))
            row = " ".join(_fit(v, w).ljust(w) for v, (_, w) in zip(cells, _COLUMNS))
            lines.append(_fit(f"  {row} {verdict}", WIDTH))
    lines.append(f"{len(result.points)} shared points; {len(result.only_ref)} only in A; {len(result.only_new)} only in B")
    return "\n".join(lines)


def to_json(result: RunComparison) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "points": [{"stage": p.stage, "point_id": p.point_id, "params": p.params,
                    "comparisons": [c.to_dict() for c in p.comparisons]} for p in result.points],
        "only_a": [list(k) for k in result.only_ref],
        "only_b": [list(k) for k in result.only_new],
    }
