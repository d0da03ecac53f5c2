"""Every warning of a run, as one list: what the report's Warnings section shows and what
``warnings.parquet`` holds are the same rows (a CI script reading the parquet sees what a reader of
the report sees, outlier repetitions included).

A warning is one row per (kind, stage, point): the plausibility rows of the results
(d5pipe.results.plausibility: ``plausibility:<kind>``, with their number and CI), then the warnings
the points recorded themselves (``extra.warnings``), filed under the plausibility kind they match
(``high variation`` -> ``high_variation`` ...) else :data:`OTHER_KIND`, and dropped when a
plausibility row of that point already measured the same kind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from d5pipe.results.plausibility import HARD
from d5pipe.results.plausibility import PREFIX as PLAUSIBILITY_PREFIX

OTHER_KIND = "recorded_warning"
KIND_ORDER: tuple[str, ...] = ("superlinear_speedup", "oversubscribed", "target_missed", "high_variation",
                               "several_environments", OTHER_KIND)
"""The kinds listed first, in this order; any other kind (``outlier_repetition`` ...) after them."""
COLUMNS: tuple[str, ...] = ("stage", "point_id", "kind", "message", "value", "ci_low", "ci_high", "hard")
"""The columns of ``warnings.parquet`` (and of ``RunResults.warnings``)."""


@dataclass(frozen=True)
class RunWarning:
    stage: str
    point_id: str
    kind: str
    message: str
    """The evidence, one sentence per finding, joined by ``; ``."""
    value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan

    @property
    def hard(self) -> bool:
        """A hard finding fails its point (d5pipe.results.plausibility.HARD)."""
        return self.kind in HARD


def kind_of(text: str) -> str:
    """The plausibility kind a recorded warning's text names, else :data:`OTHER_KIND`."""
    low = text.lower()
    if "high variation" in low:
        return "high_variation"
    if "target missed" in low or "ci target" in low:
        return "target_missed"
    if "oversubscri" in low or "exceed cores" in low or "more ranks" in low:
        return "oversubscribed"
    return OTHER_KIND


def _number(x: object) -> float:
    return math.nan if x is None or pd.isna(x) else float(x)  # type: ignore[arg-type]


def run_warnings(results: pd.DataFrame, recorded: Iterable[tuple[str, str, str]]) -> list[RunWarning]:
    """The run's warnings from its results (with their plausibility rows) and the records'
    ``(stage, point_id, text)`` warnings; ordered by kind (:data:`KIND_ORDER`), stage, point."""
    from d5pipe.results.report.units import natural_key

    rows = results[results["metric"].astype(str).str.startswith(PLAUSIBILITY_PREFIX) & (results["status"] == "ok")]
    details: dict[tuple[str, str, str], list[str]] = {}
    numbers: dict[tuple[str, str, str], tuple[float, float, float]] = {}
    for r in rows.itertuples(index=False):
        key = (str(r.metric)[len(PLAUSIBILITY_PREFIX):], str(r.stage), str(r.point_id))
        details.setdefault(key, []).append("" if pd.isna(r.error) else str(r.error))
        numbers.setdefault(key, (_number(r.value), _number(r.ci_low), _number(r.ci_high)))
    measured = set(details)
    for stage, point_id, text in recorded:
        key = (kind_of(str(text)), str(stage), str(point_id))
        if key in measured:
            continue  # the same kind, already measured from the results
        found = details.setdefault(key, [])
        if str(text) not in found:
            found.append(str(text))
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    keys = sorted(details, key=lambda k: (order.get(k[0], len(order)), natural_key(k[1]), natural_key(k[2])))
    return [RunWarning(s, p, kind, "; ".join(d for d in details[(kind, s, p)] if d),
                       *numbers.get((kind, s, p), (math.nan, math.nan, math.nan)))
            for kind, s, p in keys]


def warnings_frame(found: Iterable[RunWarning]) -> pd.DataFrame:
    """:data:`COLUMNS`, one row per warning (the table ``warnings.parquet`` is)."""
    rows = [(w.stage, w.point_id, w.kind, w.message, w.value, w.ci_low, w.ci_high, w.hard) for w in found]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({"stage": str, "point_id": str, "kind": str, "message": str, "value": float,
                         "ci_low": float, "ci_high": float, "hard": bool})


def from_frame(frame: pd.DataFrame) -> list[RunWarning]:
    """The warnings of a :func:`warnings_frame` table, in its order."""
    return [RunWarning(str(r.stage), str(r.point_id), str(r.kind), str(r.message), _number(r.value),
                       _number(r.ci_low), _number(r.ci_high)) for r in frame.itertuples(index=False)]
