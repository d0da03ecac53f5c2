"""The report's verdict sections: Failures (first), the Overview's counts, and Warnings.

Every count and every "pass" wording comes from the points' verdicts (d5pipe.results.verdicts),
never from their status: a point that ran but failed a check is a failure here. Warnings are the
rows of d5pipe.results.run_warnings (the plausibility rows of the results plus the records' own
warnings), the same rows warnings.parquet holds, listed once per kind and point.
"""

from __future__ import annotations

import pandas as pd

from d5pipe.results.plausibility import DESCRIPTIONS, HARD
from d5pipe.results.report.blocks import Block, Section, Table, Text
from d5pipe.results.report.frames import MAX_TABLE_ROWS, fmt_plain, varying_axes
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.units import natural_key
from d5pipe.results.run_warnings import OTHER_KIND, RunWarning, from_frame

REASON_COLUMNS = frozenset({"parameters", "reason", "detail", "points"})
"""Prose columns: they wrap at spaces; every other cell stays on one line."""
STATUS_SHOWN = {"skipped": "not run", "ok": "ran; check failed"}
"""How a failing point's status reads in the Failures table."""
TITLES = {
    "superlinear_speedup": "Superlinear speedup",
    "oversubscribed": "Oversubscribed ranks",
    "target_missed": "Timer CI target missed",
    "high_variation": "High variation",
    "several_environments": "Several environments",
    OTHER_KIND: "Other warnings recorded by the points",
}


def _wrap(columns: list[str]) -> set[int]:
    return {i for i, c in enumerate(columns) if c in REASON_COLUMNS}


def params_text(data: RunData, stage: str, point_id: str) -> str:
    return ", ".join(f"{a}={fmt_plain(v)}" for a, v in data.params_of(stage, point_id).items())


def verdict_counts(data: RunData) -> pd.DataFrame:
    """Per stage: points, pass, fail, unchecked (ran, no check), skipped (could not run here)."""
    v = data.res.verdicts
    skipped = (v["status"] == "skipped") & (v["verdict"] != "fail")
    kind = v["verdict"].where(~skipped, "skipped")
    table = pd.crosstab(v["stage"], kind).reindex(columns=["pass", "fail", "unchecked", "skipped"], fill_value=0)
    table.insert(0, "points", table.sum(axis=1))
    return table


def overview(data: RunData) -> Section:
    counts = verdict_counts(data)
    cols = ["points", "pass", "fail", "unchecked", "skipped"]
    rows = [[str(stage), *(str(int(counts.loc[stage, c])) for c in cols)] for stage in counts.index]
    bad = {i for i, stage in enumerate(counts.index) if counts.loc[stage, "fail"] > 0}
    total = {c: int(counts[c].sum()) for c in cols}
    if total["fail"]:
        line = Text(f"{total['fail']} of {total['points']} point(s) fail (crashed, never ran, or failed a check); "
                    "see Failures.", "bad")
    elif total["pass"] == total["points"]:
        line = Text(f"All {total['points']} point(s) pass.", "good")
    else:
        line = Text(f"No point failed: {total['pass']} pass, {total['unchecked']} unchecked (ran; no check "
                    f"applies), {total['skipped']} skipped (cannot run here).", "good")
    blocks: list[Block] = [line, Table(["stage", *cols], rows, "Points per stage and verdict", bad)]
    pairs = data.res.comparisons
    if not pairs.empty:  # the side-by-side answers, counted: what changed, what is undecided
        n = pairs["verdict"].value_counts()
        parts = [f"{int(n.get(v, 0))} {v}" for v in ("faster", "slower", "equivalent", "inconclusive", "not compared")
                 if n.get(v, 0)]
        blocks.append(Text(f"Side by side: {len(pairs)} pair(s) of a variant and its baseline: {', '.join(parts)}"
                           + ("; an inconclusive pair needs more repetitions (d5pipe run --until-decided)."
                              if n.get("inconclusive", 0) else "."), "plain"))
    desc = data.config.get("description")
    if desc:
        blocks.insert(0, Text(str(desc)))
    return Section("overview", "Overview", blocks)


def failures(data: RunData) -> Section | None:
    """Every failing point with its reason, then the skipped ones; None when there are neither."""
    v = data.res.verdicts
    failing = v[v["verdict"] == "fail"]
    skipped = v[(v["status"] == "skipped") & (v["verdict"] != "fail")]
    if failing.empty and skipped.empty:
        return None
    blocks: list[Block] = []
    if failing.empty:
        blocks.append(Text("No point failed.", "good"))
    else:
        order = sorted(failing.itertuples(index=False),
                       key=lambda r: (r.status != "failed", natural_key(r.stage), natural_key(r.point_id)))
        cols = ["stage", "point_id", "parameters", "status", "reason"]
        rows = [[str(r.stage), str(r.point_id), params_text(data, str(r.stage), str(r.point_id)),
                 STATUS_SHOWN.get(str(r.status), str(r.status)), str(r.reason)]
                for r in order[:MAX_TABLE_ROWS]]
        n_crashed = int((failing["status"] == "failed").sum())
        n_not_run = int((failing["status"] == "skipped").sum())
        n_check = len(failing) - n_crashed - n_not_run
        blocks.append(Text(f"{len(failing)} of {len(v)} point(s) fail: {n_crashed} failed (crashed, raised or "
                           f"timed out), {n_not_run} never ran, {n_check} failed a check. The sweep went on; "
                           "every row is in results.parquet.", "bad"))
        blocks.append(Table(cols, rows, "Failing points", set(range(len(rows))), _wrap(cols)))
        if len(failing) > MAX_TABLE_ROWS:
            blocks.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(failing)}; all are in results.parquet.", "note"))
    subsections: list[Section] = []
    if not skipped.empty:
        cols = ["stage", "point_id", "parameters", "reason"]
        rows = [[str(r.stage), str(r.point_id), params_text(data, str(r.stage), str(r.point_id)), str(r.reason)]
                for r in sorted(skipped.itertuples(index=False),
                                key=lambda r: (natural_key(r.stage), natural_key(r.point_id)))][:MAX_TABLE_ROWS]
        subsections.append(Section("skipped", "Skipped points (not failures)", [
            Text(f"{len(skipped)} point(s) were skipped: they cannot run here (e.g. a dtype without a kernel "
                 "on this device). Skipped points do not fail the run.", "note"),
            Table(cols, rows, "Skipped points", wrap=_wrap(cols))]))
    return Section("failures", "Failures", blocks, subsections)


def collect_warnings(data: RunData) -> list[RunWarning]:
    """The run's warnings (d5pipe.results.run_warnings), the rows of warnings.parquet, in order."""
    return from_frame(data.res.warnings)


def cause_title(cause: str) -> str:
    return TITLES.get(cause, cause.replace("_", " "))


def warnings(data: RunData) -> Section | None:
    """The Warnings section: a short summary, then one subsection per cause listing its points once."""
    found = collect_warnings(data)
    if not found:
        return None
    by_cause: dict[str, list[RunWarning]] = {}
    for w in found:
        by_cause.setdefault(w.kind, []).append(w)
    summary = "; ".join(f"{cause_title(c)}: {len(ws)} point(s)" + (" (fail)" if c in HARD else "")
                        for c, ws in by_cause.items())
    hard = any(c in HARD for c in by_cause)
    blocks: list[Block] = [Text(summary, "bad" if hard else "warn"), Text(
        "Hard findings (superlinear speedup) make their points fail; the others are warnings and change "
        "no verdict. Each point is listed once per cause.", "note")]
    subsections = []
    for cause, ws in by_cause.items():
        cols = ["stage", "point_id", "parameters", "detail"]
        rows = [[w.stage, w.point_id, params_text(data, w.stage, w.point_id), w.message] for w in ws[:MAX_TABLE_ROWS]]
        what = DESCRIPTIONS.get(cause, "warnings the points recorded themselves")
        sub: list[Block] = [Text(f"{what}.", "bad" if cause in HARD else "note"),
                            Table(cols, rows, bad_rows=set(range(len(rows))) if cause in HARD else set(),
                                  wrap=_wrap(cols))]
        if len(ws) > MAX_TABLE_ROWS:
            sub.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(ws)} points.", "note"))
        subsections.append(Section(f"warnings-{cause}", f"{cause_title(cause)} ({len(ws)})", sub))
    return Section("warnings", "Warnings", blocks, subsections)


def level_notes(data: RunData, stage: str) -> list[tuple[Text, list[str]]]:
    """One line per cause for ``stage`` (to go under its figures), naming the points it concerns,
    with the details it was built from (they name the metrics, so the line can go next to theirs)."""
    found = [w for w in collect_warnings(data) if w.stage == stage]
    by_cause: dict[str, list[RunWarning]] = {}
    for w in found:
        by_cause.setdefault(w.kind, []).append(w)
    out: list[tuple[Text, list[str]]] = []
    axes = varying_axes(data.stage_rows(stage), repeat=True)

    def label(point_id: str) -> str:
        params = data.params_of(stage, point_id)
        return ", ".join(f"{a.rsplit('.', 1)[-1]}={fmt_plain(params[a])}" for a in axes if a in params) or point_id

    for cause, ws in by_cause.items():
        names = "; ".join(label(w.point_id) for w in ws[:6])
        more = f" and {len(ws) - 6} more" if len(ws) > 6 else ""
        desc = DESCRIPTIONS.get(cause)
        text = Text(f"{cause_title(cause)} on {len(ws)} point(s) ({names}{more})"
                    + (f": {desc}" if desc else "") + ". See Warnings.", "bad" if cause in HARD else "warn")
        out.append((text, [w.message for w in ws]))
    return out
