"""One verdict per point, and the run's verdict that exit codes and CI gate on.

A point's **checks** are its rows of kind ``verdict`` (``correctness``, ``grad_check``,
``params_identical``, ``matches_serial``, ``collective_correct``, ``acceptance:<metric>``,
``plausibility:<name>``, ``sanity:<rule>``...), each ``pass`` or ``fail``; a row's ``error`` is its
evidence (the reason of a failing point). Its **verdict**:

* ``fail`` -- the point failed (crashed, raised, timed out), never ran, or any check failed;
* ``pass`` -- it ran and every check it has passed (at least one);
* ``unchecked`` -- it ran (or was skipped: cannot run here) and has no check.

The run passes when no point's verdict is ``fail``; ``d5pipe run`` and ``d5pipe status`` then
exit 0, otherwise :data:`EXIT_NOT_PASSED` with a one-line summary. Skipped points (e.g. a dtype
with no kernel on this device) are counted and shown but do not fail the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.levels.verify import FAIL, PASS

if TYPE_CHECKING:
    import pandas as pd

EXIT_NOT_PASSED = 3
"""Exit code of ``d5pipe run`` / ``d5pipe status`` when some point failed, did not run or failed a check."""
NOT_RUN_PREFIX = "not run:"
"""Start of the error text of a planned point that has no record."""


def check_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The check rows (``kind == verdict`` with text pass/fail) of ok points."""
    rows = results[(results["kind"] == "verdict") & (results["status"] == "ok")]
    return rows[rows["text"].isin([PASS, FAIL])]


def point_verdicts(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, point_id): ``status, verdict, reason`` (reason empty for a pass).

    Vectorised over the points; only failing points get a per-row reason string.
    """
    import numpy as np
    import pandas as pd

    keys = ["stage", "point_id"]
    pts = results.drop_duplicates(keys)[[*keys, "status", "error"]].reset_index(drop=True)
    chk = check_rows(results)
    failed = chk[chk["text"] == FAIL]
    first = failed.drop_duplicates(keys)[[*keys, "metric", "error", "value"]].rename(
        columns={"metric": "f_metric", "error": "f_error", "value": "f_value"})
    counts = failed.groupby(keys).size().rename("n_failed").reset_index()
    passed = chk.loc[chk["text"] == PASS, keys].drop_duplicates().assign(has_pass=True)
    m = pts.merge(first, on=keys, how="left").merge(counts, on=keys, how="left").merge(passed, on=keys, how="left")
    status = m["status"].astype(str)
    text = m["error"].astype(object).where(m["error"].notna(), "").astype(str)
    not_run = (status == "skipped") & text.str.startswith(NOT_RUN_PREFIX)
    check_failed = m["f_metric"].notna() & (status == "ok")
    has_pass = m["has_pass"].astype(object).where(m["has_pass"].notna(), False).astype(bool)
    verdict = np.select(
        [status == "failed", not_run, check_failed, status == "skipped", has_pass],
        ["fail", "fail", "fail", "unchecked", "pass"], "unchecked")
    reason = pd.Series([""] * len(m), index=m.index, dtype=object)
    skipped = (status == "skipped") & ~not_run
    reason[skipped] = "skipped: " + text[skipped]
    reason[not_run] = text[not_run]
    for i in m.index[status == "failed"]:
        lines = text[i].splitlines()
        reason[i] = f"failed: {lines[0] if lines else 'no error text'}"
    for i in m.index[check_failed]:
        err, val = m.at[i, "f_error"], m.at[i, "f_value"]
        detail = str(err) if err is not None and not pd.isna(err) else ("" if pd.isna(val) else f"value {val:g}")
        more = int(m.at[i, "n_failed"]) - 1
        reason[i] = (f"check {m.at[i, 'f_metric']} failed" + (f" ({detail})" if detail else "")
                     + (f"; {more} more" if more else ""))
    return m[[*keys, "status"]].assign(verdict=verdict, reason=reason.astype(str))


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
        parts = [f"{n} {what}" for n, what in ((self.failed_points, "failed"), (self.failed_checks, "failed checks"),
                                               (self.not_run, "never ran")) if n]
        where = f"; see {report}#failures" if report else ""
        return f"{bad} of {self.points} points did not pass ({', '.join(parts)}){where}"


def run_verdict(pv: pd.DataFrame) -> RunVerdict:
    """The run's verdict from its points' verdicts (:func:`point_verdicts`)."""
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


def read_verdict(run_dir: Path) -> RunVerdict | None:
    """The verdict d5pipe.results.run_results.write_results left, or None when it is missing or older than the results."""
    import json

    from d5pipe.rundir.layout import RunDir

    rd = RunDir.of(run_dir)
    try:
        if rd.verdict_path.stat().st_mtime_ns < rd.results_path.stat().st_mtime_ns:
            return None
        data = json.loads(rd.verdict_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    data.pop("schema_version", None)
    data["failures"] = [tuple(f) for f in data.get("failures", [])]
    return RunVerdict(**data)
