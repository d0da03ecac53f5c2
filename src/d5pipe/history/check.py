"""``d5pipe history check``: every timing series of the store searched for steps
(d5pipe.history.steps), each finding explained by what changed between the runs on either side."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from d5pipe.history.queries import run_rows_of, series_groups, series_info, series_profiles
from d5pipe.history.steps import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_STEP,
    DEFAULT_THRESHOLD,
    FamilyNoise,
    SeriesCheck,
    Step,
    check_series,
    family_noise,
)
from d5pipe.provenance.environment import flatten
from d5pipe.results.junit import Case, junit_document
from d5pipe.results.profiles import explain_change
from d5pipe.results.timing_compare import lower_is_better

if TYPE_CHECKING:
    import duckdb

FAMILY_SAMPLE = 1000
"""Series of one metric name that estimate its family's noise (a median: more change it little)."""
RUN_FACTS = ("env_hash", "hostname", "slurm_cluster", "slurm_nodes", "d5pipe_version", "git_commit")


@dataclass(frozen=True)
class Finding:
    experiment: str
    stage: str
    params: str
    metric: str
    unit: str
    machine: str
    step: Step
    run_after: str
    created_after: Any
    changed: tuple[str, ...]
    lower_is_better: bool
    also: tuple[str, ...] = ()
    """Metrics of the same configuration that are a constant multiple or reciprocal of this one
    (GFLOP/s, GB/s of a time): the same step, shown once."""
    why: str = ""
    """Where the time went, when runs on both sides of the step were profiled: the operators whose
    self time changed most (d5pipe.results.profiles.explain_change)."""

    @property
    def regression(self) -> bool:
        return (self.step.ratio > 1) == self.lower_is_better

    @property
    def slowdown(self) -> float:
        """Loss of performance (positive: worse), whatever the metric's direction."""
        return self.step.ratio - 1 if self.lower_is_better else 1 / self.step.ratio - 1

    def line(self) -> str:
        lo, hi = self.step.ci
        what = "regression" if self.regression else "improvement"
        why = "; ".join(self.changed) if self.changed else "nothing recorded changed"
        also = f" (also {', '.join(self.also)})" if self.also else ""
        went = f"; where the time went (profiles): {self.why}" if self.why else ""
        return (f"{what}: {self.experiment} {self.stage} {self.params} {self.metric}{also}: x{self.step.ratio:.3f} "
                f"[{lo:.3f}, {hi:.3f}] from run {self.run_after} ({_when(self.created_after)}; "
                f"{self.step.runs_before} runs before, {self.step.runs_after} after, p={self.step.p:.2g}) "
                f"on machine {self.machine}; changed: {why}{went}")


@dataclass(frozen=True)
class SeriesResult:
    series: str
    experiment: str
    stage: str
    params: str
    metric: str
    machine: str
    check: SeriesCheck


@dataclass(frozen=True)
class HistoryCheck:
    findings: list[Finding]
    series: list[SeriesResult]

    def counts(self) -> dict[str, int]:
        out = {"series": len(self.series), "steps": 0, "steady": 0, "inconclusive": 0}
        for s in self.series:
            out[s.check.status] += 1
        return out


def _when(ts: Any) -> str:
    return ts.isoformat(timespec="seconds") if hasattr(ts, "isoformat") else str(ts)


def what_changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    """The differences between two runs' rows: config values, packages, user code, then the run's
    facts (environment hash, node, d5pipe version, commit)."""
    out: list[str] = []
    cb, ca = flatten(before.get("config") or {}), flatten(after.get("config") or {})
    out += [f"config {k}: {cb.get(k)!r} -> {ca.get(k)!r}" for k in sorted(set(cb) | set(ca)) if cb.get(k) != ca.get(k)]
    pb, pa = before.get("packages") or {}, after.get("packages") or {}
    out += [f"package {k}: {pb.get(k)} -> {pa.get(k)}" for k in sorted(set(pb) | set(pa)) if pb.get(k) != pa.get(k)]
    ub, ua = before.get("user_code") or {}, after.get("user_code") or {}
    out += [f"user code {k}: {ub.get(k)} -> {ua.get(k)}" for k in sorted(set(ub) | set(ua)) if ub.get(k) != ua.get(k)]
    out += [f"{k}: {before.get(k)} -> {after.get(k)}" for k in RUN_FACTS if before.get(k) != after.get(k)]
    return tuple(out)


def _family(con: duckdb.DuckDBPyConnection, experiment: str | None,
            info: dict[tuple[str, str], Any]) -> dict[str, FamilyNoise]:
    """Each metric name's family noise, from up to :data:`FAMILY_SAMPLE` of its series."""
    logs: dict[str, list[list[float]]] = {}
    for (ser, metric, _), g in series_groups(con, experiment):
        fam = logs.setdefault(_name(metric), [])
        if len(fam) < FAMILY_SAMPLE:
            fam.append(run_logs(g, str(info[(ser, metric)].unit), metric))
    return {name: family_noise(series) for name, series in logs.items()}


def run_logs(g: Any, unit: str, metric: str) -> list[float]:
    """A series' value per run, as the check reads it: the log of the run's best repetition (the
    fastest time, the highest rate). Interference on a shared machine only slows a process down,
    so a run's best process is its least disturbed one: on this VM the sd of a run's value between
    runs was 0.039 and 0.014 (matmul 64 and 256) with the best, against 0.079 and 0.043 with the
    median of three repetitions (tests/data/run_noise.json). What is shown (d5pipe history series)
    is the median, with the lowest and the highest."""
    column = "low" if lower_is_better(unit, metric) else "high"
    return [math.log(v) for v in g[column]]


def check_history(con: duckdb.DuckDBPyConnection, *, experiment: str | None = None, since: datetime | None = None,
                  alpha: float = DEFAULT_ALPHA, min_step: float = DEFAULT_MIN_STEP,
                  threshold: float = DEFAULT_THRESHOLD) -> HistoryCheck:
    """Every timing series (per machine type) checked, one at a time; findings whose first run
    after the step is at or after ``since`` (all when None). The family of a series is the same
    metric (its last name part) in the other configurations."""
    info = series_info(con, experiment)
    family = _family(con, experiment, info)
    results: list[SeriesResult] = []
    pending: list[tuple[Any, Step, Any, Any, tuple[str, list[str], list[str]]]] = []
    for (ser, metric, machine), g in series_groups(con, experiment):
        about = info[(ser, metric)]
        chk = check_series(run_logs(g, str(about.unit), metric), family.get(_name(metric)), alpha, min_step,
                           threshold)
        results.append(SeriesResult(ser, str(about.experiment), str(about.stage), str(about.params), metric, machine,
                                    chk))
        for st in chk.steps:
            if since is None or _after(g["created"].iloc[st.index], since):
                ids = [str(r) for r in g["run_id"]]  # the profiles are read once the series' stream is done
                sides = (ser, ids[st.index - st.runs_before:st.index], ids[st.index:st.index + st.runs_after])
                pending.append((about, st, g.iloc[st.index - 1], g.iloc[st.index], sides))
    rows = run_rows_of(con, sorted({str(r["run_id"]) for _, _, b, a, _ in pending for r in (b, a)}))
    findings = [Finding(str(about.experiment), str(about.stage), str(about.params), str(after["metric"]),
                        str(about.unit), str(after["machine"]), st, str(after["run_id"]),
                        after["created"],
                        what_changed(rows.get(str(before["run_id"]), {}), rows.get(str(after["run_id"]), {})),
                        lower_is_better(str(about.unit), str(after["metric"])), why=_why(con, *sides))
                for about, st, before, after, sides in pending]
    findings.sort(key=lambda f: (not f.regression, -abs(math.log(f.step.ratio))))
    return HistoryCheck(_fold_derived(findings), results)


def _why(con: duckdb.DuckDBPyConnection, series: str, before: list[str], after: list[str]) -> str:
    """The operators whose self time changed most between the profiled runs ``before`` and
    ``after`` a step of ``series`` ('' unless both sides hold a profile)."""
    return explain_change(series_profiles(con, series, before), series_profiles(con, series, after))


def _fold_derived(findings: list[Finding]) -> list[Finding]:
    """One finding per step of a configuration and its derived metrics: the same run and the same
    |log ratio| (a rate of a time, a constant times it), kept as the time's finding."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in findings:
        key = (f.experiment, f.stage, f.params, f.machine, f.run_after, round(abs(math.log(f.step.ratio)), 6))
        groups.setdefault(key, []).append(f)
    for group in groups.values():
        group.sort(key=lambda f: (not f.lower_is_better, f.metric))
    return [replace(group[0], also=tuple(f.metric for f in group[1:])) for group in groups.values()]


def _name(metric: str) -> str:
    return metric.split(":")[-1]


def _after(ts: Any, since: datetime) -> bool:
    import pandas as pd

    def utc(x: Any) -> pd.Timestamp:
        t = pd.Timestamp(x)
        return t.tz_localize("UTC") if t.tzinfo is None else t

    return bool(utc(ts) >= utc(since))


def junit_xml(result: HistoryCheck, fail_pct: float | None) -> bytes:
    """A test suite per stage, a test case per series and metric: failed when it holds a
    regression beyond ``fail_pct`` percent, skipped when inconclusive (d5pipe.results.junit writes it;
    a suite here does not count its cases)."""
    by_key = {(f.experiment, f.stage, f.params, f.metric, f.machine): f for f in result.findings if f.regression}
    suites: dict[str, list[Case]] = {}  # stages in order of appearance
    for s in result.series:
        f = by_key.get((s.experiment, s.stage, s.params, s.metric, s.machine))
        failure = f.line() if f is not None and fail_pct is not None and f.slowdown * 100 > fail_pct else None
        suites.setdefault(s.stage, []).append(Case(
            f"d5pipe.history.{s.experiment}.{s.stage}", f"{s.params} {s.metric} @{s.machine}", failure=failure,
            skipped=s.check.note if failure is None and s.check.status == "inconclusive" else None))
    return junit_document("d5pipe history", suites, suite_counts=False)
