"""One verdict per point, and the run's verdict that exit codes and CI gate on.

A point's **checks** are its rows of kind ``verdict`` (``correctness``, ``grad_check``,
``params_identical``, ``matches_serial``, ``collective_correct``, ``acceptance:<metric>``,
``plausibility:<name>``...), each ``pass`` or ``fail``. Its **verdict**:

* ``fail`` -- the point failed (crashed, raised, timed out), never ran, or any check failed;
* ``pass`` -- it ran and every check it has passed (at least one);
* ``unchecked`` -- it ran (or was skipped: cannot run here) and has no check.

The run passes when no point's verdict is ``fail``; ``d5pipe run`` and ``d5pipe status`` then
exit 0, otherwise :data:`EXIT_NOT_PASSED` with a one-line summary. Skipped points (e.g. a dtype
with no kernel on this device) are counted and shown but do not fail the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

EXIT_NOT_PASSED = 3
"""Exit code of ``d5pipe run`` / ``d5pipe status`` when some point failed, did not run or failed a check."""
NOT_RUN_PREFIX = "not run:"
"""Start of the error text of a planned point that has no record."""


def checks(results: pd.DataFrame) -> pd.DataFrame:
    """The check rows (``kind == verdict`` with text pass/fail) of ok points."""
    rows = results[(results["kind"] == "verdict") & (results["status"] == "ok")]
    return rows[rows["text"].isin(["pass", "fail"])]


def point_verdicts(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, point_id): ``status, verdict, reason`` (reason empty for a pass)."""
    import pandas as pd

    pts = results.drop_duplicates(["stage", "point_id"])[["stage", "point_id", "status", "error"]]
    pts = pts.set_index(["stage", "point_id"])
    chk = checks(results)
    failed = chk[chk["text"] == "fail"]
    first_fail = failed.drop_duplicates(["stage", "point_id"]).set_index(["stage", "point_id"])
    n_failed = failed.groupby(["stage", "point_id"]).size()
    has_pass = set(chk[chk["text"] == "pass"].set_index(["stage", "point_id"]).index)
    verdict: list[str] = []
    reason: list[str] = []
    for key, row in pts.iterrows():
        status, error = str(row["status"]), row["error"]
        text = "" if error is None or pd.isna(error) else str(error)
        if status == "failed":
            verdict.append("fail")
            reason.append(f"failed: {text.splitlines()[0] if text else 'no error text'}")
        elif status == "skipped" and text.startswith(NOT_RUN_PREFIX):
            verdict.append("fail")
            reason.append(text)
        elif key in first_fail.index:
            f = first_fail.loc[key]
            detail = f["error"] if f["error"] is not None and not pd.isna(f["error"]) else (
                "" if pd.isna(f["value"]) else f"value {f['value']:g}")
            more = int(n_failed.loc[key]) - 1
            verdict.append("fail")
            reason.append(f"check {f['metric']} failed" + (f" ({detail})" if detail else "")
                          + (f"; {more} more" if more else ""))
        elif status == "skipped":
            verdict.append("unchecked")
            reason.append(f"skipped: {text}")
        elif key in has_pass:
            verdict.append("pass")
            reason.append("")
        else:
            verdict.append("unchecked")
            reason.append("")
    out = pts.assign(verdict=verdict, reason=reason).reset_index()
    return out[["stage", "point_id", "status", "verdict", "reason"]]


def with_verdict_column(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with its point's ``verdict`` on every row."""
    v = point_verdicts(results)[["stage", "point_id", "verdict"]]
    return results.drop(columns=["verdict"], errors="ignore").merge(v, on=["stage", "point_id"], how="left")


@dataclass
class RunVerdict:
    """Counts over the planned points, and the one-line summary."""

    points: int = 0
    passed: int = 0
    unchecked: int = 0
    skipped: int = 0
    failed_points: int = 0
    failed_checks: int = 0
    not_run: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(stage, point_id, reason) of every failing point."""

    @property
    def ok(self) -> bool:
        return self.failed_points == 0 and self.failed_checks == 0 and self.not_run == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else EXIT_NOT_PASSED

    def line(self, report: str = "") -> str:
        bad = self.failed_points + self.failed_checks + self.not_run
        if self.ok:
            text = f"all {self.points} points passed or unchecked ({self.passed} pass, {self.unchecked} unchecked"
            text += f", {self.skipped} skipped)" if self.skipped else ")"
            return text
        parts = []
        if self.failed_points:
            parts.append(f"{self.failed_points} failed")
        if self.failed_checks:
            parts.append(f"{self.failed_checks} failed checks")
        if self.not_run:
            parts.append(f"{self.not_run} never ran")
        where = f"; see {report}#failures" if report else ""
        return f"{bad} of {self.points} points did not pass ({', '.join(parts)}){where}"


def run_verdict(results: pd.DataFrame) -> RunVerdict:
    """The run's verdict from its results (one row per point and metric)."""
    pv = point_verdicts(results)
    rv = RunVerdict(points=len(pv))
    for r in pv.itertuples(index=False):
        if r.verdict == "pass":
            rv.passed += 1
        elif r.verdict == "unchecked":
            rv.unchecked += 1
            rv.skipped += int(r.status == "skipped")
        else:
            if r.status == "failed":
                rv.failed_points += 1
            elif r.status == "skipped":
                rv.not_run += 1
            else:
                rv.failed_checks += 1
            rv.failures.append((str(r.stage), str(r.point_id), str(r.reason)))
    return rv
