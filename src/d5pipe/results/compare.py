"""Two runs side by side: ``d5pipe compare A B``, ``d5pipe reproduce`` and ``d5pipe ab`` read this.

:func:`load_points` reads ``results.parquet`` (one row per point and metric) and, for the timings
a timer measured, each process's fastest sample from its point record (what a timing is compared
by, :mod:`d5pipe.results.timing_compare`). Points
are matched by their stage and sweep parameters, the ``repeat`` axis aside, so two configs of one
experiment compare configuration by configuration, each side's repetitions together:

* every **timing** of a configuration is compared across the repetitions of both sides by the one
  comparison model (:mod:`d5pipe.results.timing_compare`): changed, equivalent or inconclusive,
  one family per comparison (Holm's correction over every timing compared); a timing that is a
  constant multiple or reciprocal of another of its configuration (GFLOP/s of a time, a throughput
  of a latency) follows that one and is not counted twice;
* every **other** metric is compared repetition by repetition (:mod:`d5pipe.results.metric_compare`:
  exact for deterministic, count and verdict metrics, within a tolerance for numerical ones) and
  folded into one line: identical (or within tolerance) in all repetitions, else the repetitions
  that differ.

A *regression* (``--fail-on-regression PCT``) is a timing whose verdict is ``changed`` and whose
loss of performance exceeds PCT percent (slower for times, lower for rates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from d5pipe.core.canonical import canonical_json
from d5pipe.core.errors import D5PipeError
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.collect import metric_samples
from d5pipe.results.columns import COMPARISON_PREFIXES, axis_columns, is_missing, load_results, row_params
from d5pipe.results.metric_compare import ComparePolicy, Comparison, MetricValue, compare_metric
from d5pipe.results.plausibility import PREFIX as PLAUSIBILITY_PREFIX
from d5pipe.results.repetition_values import Side, derived_timings, fastest_sample, follow_sign
from d5pipe.results.timing_compare import Item, Policy, TimingComparison, compare_family, lower_is_better
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, parse_record

STATUS_METRIC = "status"


@dataclass
class PointData:
    """Everything one run says about one point (one repetition of a configuration)."""

    stage: str
    point_id: str
    status: str
    error: str | None
    seed: int | None
    params: dict[str, Any]
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    fastest: dict[str, float] = field(default_factory=dict)
    """Timing -> this process's fastest sample, for timings that are the median of their samples
    (:func:`d5pipe.results.repetition_values.fastest_sample`): what the timing is compared by."""

    @property
    def repetition(self) -> int:
        return int(self.params.get(REPEAT_AXIS, 0) or 0)


@dataclass
class PointComparison:
    """One configuration of both runs: its timings and its other metrics."""

    stage: str
    point_id: str
    """The ID of A's first repetition of the configuration."""
    params: dict[str, Any]
    comparisons: list[Comparison]
    """Status, seed and every non-timing metric, folded over the repetitions."""
    timings: list[TimingComparison] = field(default_factory=list)
    ids: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    """The point IDs of the configuration's repetitions in A and in B."""
    why: str = ""
    """Where a changed timing's time went, from both sides' profiles (d5pipe.results.profiles)."""

    def worst(self) -> int:
        """0: something changed or differs, 1: inconclusive, 2: the rest (for ordering)."""
        if any(t.verdict == "changed" for t in self.timings) or \
                any(c.verdict == "not_reproduced" for c in self.comparisons):
            return 0
        return 1 if any(t.verdict == "inconclusive" for t in self.timings) else 2


@dataclass
class RunComparison:
    points: list[PointComparison]
    only_ref: list[tuple[str, str]]
    only_new: list[tuple[str, str]]
    policy: Policy = field(default_factory=Policy)
    paired: bool = False
    """True when the sides were measured interleaved, repetition by repetition (``d5pipe ab``)."""

    @property
    def timings(self) -> list[TimingComparison]:
        return [t for p in self.points for t in p.timings]

    def counts(self) -> dict[str, int]:
        """Verdicts of the timings (derived ones left out: they repeat another's test)."""
        out = {"changed": 0, "inconclusive": 0, "equivalent": 0, "not_compared": 0}
        for t in self.timings:
            if not t.derived_from:
                out[t.verdict] += 1
        return out


def _opt_float(v: Any) -> float | None:
    return None if is_missing(v) else float(v)


def load_points(run_dir: Path, fastest: bool = True) -> dict[tuple[str, str], PointData]:
    """(stage, point_id) -> PointData, from ``results.parquet``; with ``fastest``, each timing's
    fastest sample too, from the point records (what a comparison needs, a grouping does not)."""
    run_dir = Path(run_dir)
    df = load_results(run_dir)
    axis_cols = axis_columns(df.columns)
    # plausibility rows are derived from this run's timings (which are compared themselves) and
    # from this machine's noise; speedup rows repeat the side-by-side comparison of this run
    df = df[~df["metric"].astype(str).str.startswith((PLAUSIBILITY_PREFIX, *COMPARISON_PREFIXES))]
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
                params=row_params(row, axis_cols),
            )
            points[key] = point
        name = str(row["metric"])
        if name == STATUS_METRIC:  # the placeholder row of a failed/skipped/metric-less point
            continue
        kind = "numerical" if is_missing(row.get("kind")) else str(row["kind"])
        value: float | str | None = _opt_float(row["value"])
        text = row.get("text")
        if not is_missing(text) and str(text) != "" and (value is None or kind == "verdict"):
            # A verdict is its text ("pass"/"fail"); an acceptance row's value is the metric it judged.
            value = str(text)
        point.metrics[name] = MetricValue(
            value=value, unit="" if is_missing(row.get("unit")) else str(row["unit"]), kind=kind,
            ci_low=_opt_float(row.get("ci_low")), ci_high=_opt_float(row.get("ci_high")))
    if fastest:
        _read_fastest(run_dir, points)
    return points


def _read_fastest(run_dir: Path, points: dict[tuple[str, str], PointData]) -> None:
    """Each point's fastest samples, from its record (results.parquet keeps no samples); a point
    whose record is missing or unreadable keeps its medians."""
    rd = RunDir.of(run_dir)
    for (stage, pid), point in points.items():
        timings = {n: m for n, m in point.metrics.items() if m.kind == "timing" and isinstance(m.value, float)}
        if point.status != "ok" or not timings:
            continue
        try:
            samples = metric_samples(parse_record(rd.record(stage, pid).read_bytes(), pid))
        except (OSError, CorruptRecord, D5PipeError):
            continue
        for name, m in timings.items():
            assert isinstance(m.value, float)
            best = fastest_sample(m.value, samples.get(name), lower_is_better(m.unit, name))
            if best is not None:
                point.fastest[name] = best


GroupKey = tuple[str, str]
"""(stage, canonical JSON of the point's parameters without ``repeat``)."""


def group_key(point: PointData) -> GroupKey:
    return point.stage, canonical_json({k: v for k, v in point.params.items() if k != REPEAT_AXIS})


def groups(points: dict[tuple[str, str], PointData]) -> dict[GroupKey, dict[int, PointData]]:
    """The repetitions of each configuration: (stage, parameters) -> repetition index -> point."""
    out: dict[GroupKey, dict[int, PointData]] = {}
    for point in points.values():
        out.setdefault(group_key(point), {})[point.repetition] = point
    return out


def _timed(reps: dict[int, PointData], name: str) -> list[int]:
    """The repetitions that ran (``ok``) and have a number for timing ``name``."""
    return [r for r in sorted(reps) if reps[r].status == "ok"
            and isinstance(getattr(reps[r].metrics.get(name), "value", None), (int, float))]


def by_fastest(name: str, *sides: dict[int, PointData]) -> bool:
    """Whether timing ``name`` is compared by each process's fastest sample: every repetition of
    every side has one (else all by their values, so the two sides are the same statistic)."""
    return all(name in reps[r].fastest for reps in sides for r in _timed(reps, name))


def timing_side(reps: dict[int, PointData], name: str, fastest: bool = False) -> Side:
    """A timing's value in each repetition that ran (``ok``) and has it -- its fastest sample with
    ``fastest`` (:func:`by_fastest`) -- with each repetition's within-process spread (half its CI /
    its value)."""
    values, idx, within = [], [], []
    for r in _timed(reps, name):
        point = reps[r]
        m = point.metrics[name]
        assert isinstance(m.value, (int, float))
        v = float(m.value)
        values.append(point.fastest[name] if fastest else v)
        idx.append(r)
        ok = m.ci_low is not None and m.ci_high is not None and math.isfinite(v) and v > 0
        within.append((m.ci_high - m.ci_low) / 2 / v if ok else math.nan)  # type: ignore[operator]
    return Side.of(values, idx, within, fastest)


def timing_names(reps: dict[int, PointData]) -> dict[str, MetricValue]:
    names: dict[str, MetricValue] = {}
    for r in sorted(reps):
        for name, m in reps[r].metrics.items():
            if m.kind == "timing":
                names.setdefault(name, m)
    return names


def _fold(comps: list[tuple[int, Comparison]], n_common: int) -> list[Comparison]:
    """One line per metric over the repetitions: the first comparison when all agree, else the
    differing repetitions named."""
    by_metric: dict[str, list[tuple[int, Comparison]]] = {}
    for r, c in comps:
        by_metric.setdefault(c.metric, []).append((r, c))
    out = []
    for items in by_metric.values():
        bad = [(r, c) for r, c in items if c.verdict == "not_reproduced"]
        first = (bad or items)[0][1]
        if not bad:
            out.append(first if len(items) == 1 else
                       replace(first, detail=first.detail or f"same in {len(items)} repetitions"))
            continue
        reps = ", ".join(str(r) for r, _ in bad)
        out.append(replace(first, detail=f"differs in repetition(s) {reps} of {n_common}: {first.detail}"))
    return out


def _same(metric: str, kind: str, ref: str | None, new: str | None, differs: str) -> Comparison:
    """Whether ``ref`` and ``new`` are equal, ``differs`` the detail when they are not."""
    return Comparison(metric=metric, kind=kind, verdict="reproduced" if ref == new else "not_reproduced",
                      reference=ref, candidate=new, detail="" if ref == new else differs)


def compare_point(ref: PointData, new: PointData, policy: ComparePolicy, check_seeds: bool = False) -> list[Comparison]:
    """Status, optionally seed, then each non-timing metric of one repetition pair."""
    out = [_same("status", "verdict", ref.status, new.status,
                 f"{ref.status} -> {new.status}{f' ({new.error})' if new.error else ''}")]
    if check_seeds:
        out.append(_same("seed", "deterministic", None if ref.seed is None else str(ref.seed),
                         None if new.seed is None else str(new.seed), "the re-run used a different seed"))
    for name, ref_metric in ref.metrics.items():
        if ref_metric.kind == "timing":
            continue
        new_metric = new.metrics.get(name)
        if new_metric is None:
            out.append(Comparison(metric=name, kind=ref_metric.kind, verdict="not_reproduced",
                                  reference=ref_metric.value, candidate=None, unit=ref_metric.unit,
                                  detail="metric missing in the candidate run"))
        else:
            out.append(compare_metric(name, ref_metric, new_metric, policy))
    for name, new_metric in new.metrics.items():
        if name not in ref.metrics and new_metric.kind != "timing":
            out.append(Comparison(metric=name, kind=new_metric.kind, verdict="not_compared", reference=None,
                                  candidate=new_metric.value, unit=new_metric.unit,
                                  detail="metric only in the candidate run"))
    return out


def _on_fastest(sides: dict[str, tuple[Side, Side]], follows: dict[str, str], reps_a: dict[int, PointData],
                reps_b: dict[int, PointData]) -> dict[str, tuple[Side, Side]]:
    """Each timing on its processes' fastest samples where both sides have them; a timing that
    follows another (GFLOP/s of a time) moved by the same factor per process, so it stays that
    timing's constant multiple or reciprocal and repeats its test exactly."""
    out = dict(sides)
    moved = {name for name in sides if name not in follows and by_fastest(name, reps_a, reps_b)}
    for name in moved:
        out[name] = (timing_side(reps_a, name, True), timing_side(reps_b, name, True))
    for name, src in follows.items():
        if src not in moved:
            continue
        pair = []
        for (old_src, new_src, own) in zip(sides[src], out[src], sides[name]):
            ok = len(own.values) == len(old_src.values) and all(v > 0 for v in (*own.values, *old_src.values))
            sign = follow_sign(old_src.values, own.values) if ok else None
            if sign is None:
                break
            pair.append(replace(own, fastest=True, values=tuple(v * (n / o) ** sign for v, o, n in
                                                                zip(own.values, old_src.values, new_src.values))))
        if len(pair) == 2:
            out[name] = (pair[0], pair[1])
    return out


def compare_loaded(ref: dict[tuple[str, str], PointData], new: dict[tuple[str, str], PointData],
                   policy: ComparePolicy, check_seeds: bool = False, timing: Policy | None = None,
                   paired: bool = False) -> RunComparison:
    """Match configurations by (stage, parameters); fold the other metrics over repetition pairs,
    compare every timing across the repetitions as one family (module docstring)."""
    timing = timing or Policy()
    ga, gb = groups(ref), groups(new)
    shared = sorted(k for k in ga if k in gb)
    items: list[Item] = []
    owners: list[int] = []
    points = []
    for key in shared:
        reps_a, reps_b = ga[key], gb[key]
        first = reps_a[min(reps_a)]
        common = sorted(set(reps_a) & set(reps_b))
        pairs = [(r, c) for r in common for c in compare_point(reps_a[r], reps_b[r], policy, check_seeds)]
        params = {k: v for k, v in first.params.items() if k != REPEAT_AXIS}
        points.append(PointComparison(key[0], first.point_id, params, _fold(pairs, len(common)),
                                      ids=(tuple(p.point_id for p in reps_a.values()),
                                           tuple(p.point_id for p in reps_b.values()))))
        names = timing_names(reps_a)
        sides = {name: (timing_side(reps_a, name), timing_side(reps_b, name)) for name in names}
        follows = derived_timings({n: s[0].values for n, s in sides.items()})
        sides = _on_fastest(sides, follows, reps_a, reps_b)
        for name, m in names.items():
            a, b = sides[name]
            items.append(Item(name, m.unit, a, b, derived_from=follows.get(name, "")))
            owners.append(len(points) - 1)
    for owner, result in zip(owners, compare_family(items, timing, paired)):
        points[owner].timings.append(result)
    return RunComparison(
        points=sorted(points, key=lambda p: (p.stage, p.point_id)),
        only_ref=sorted((p.stage, p.point_id) for k, reps in ga.items() for r, p in reps.items()
                        if r not in gb.get(k, {})),
        only_new=sorted((p.stage, p.point_id) for k, reps in gb.items() for r, p in reps.items()
                        if r not in ga.get(k, {})),
        policy=timing, paired=paired,
    )


def compare_runs(a: Path, b: Path, policy: ComparePolicy | None = None, allow_different: bool = False,
                 labels: tuple[str, str] | None = None, timing: Policy | None = None,
                 paired: bool = False) -> RunComparison:
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
    return compare_loaded(load_points(Path(a)), load_points(Path(b)), policy, timing=timing, paired=paired)


def regressions(result: RunComparison, pct: float) -> list[tuple[PointComparison, TimingComparison]]:
    """Changed timings that lost more than ``pct`` percent of performance (module docstring)."""
    return [(p, t) for p in result.points for t in p.timings
            if t.verdict == "changed" and not t.derived_from and (t.slowdown or 0.0) > pct / 100.0]


def to_json(result: RunComparison) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "policy": {"alpha": result.policy.alpha, "margin": result.policy.margin,
                   "correction": result.policy.correction, "paired": result.paired},
        "counts": result.counts(),
        "points": [{"stage": p.stage, "point_id": p.point_id, "params": p.params,
                    "timings": [t.to_dict() for t in p.timings], **({"why": p.why} if p.why else {}),
                    "comparisons": [c.to_dict() for c in p.comparisons]} for p in result.points],
        "only_a": [list(k) for k in result.only_ref],
        "only_b": [list(k) for k in result.only_new],
    }
