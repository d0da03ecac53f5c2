"""The operators a changed timing is made of: ``d5pipe compare``, ``ab`` and ``reproduce`` set each
changed configuration's ``why`` from both runs' ``profile.parquet`` (d5pipe.results.profiles);
``history check`` does the same from the profiles the store keeps (d5pipe.history.check)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from d5pipe.results.compare import RunComparison
from d5pipe.results.profiles import COLUMNS, by_operator, explain_change
from d5pipe.rundir.layout import RunDir


def read_profiles(run_dir: Path) -> pd.DataFrame:
    """A run's ``profile.parquet`` (empty when none was written)."""
    path = RunDir.of(run_dir).side_table("profile")
    return pd.read_parquet(path) if path.exists() else pd.DataFrame(columns=COLUMNS)


def explain_comparison(result: RunComparison, a: Path, b: Path, limit: int = 3) -> None:
    """Set ``why`` on each configuration with a changed timing that both runs profiled: the
    operators whose self time changed most (``d5pipe compare``, ``ab`` and ``reproduce``)."""
    changed = [p for p in result.points if any(t.verdict == "changed" and not t.derived_from for t in p.timings)]
    if not changed:
        return
    pa_, pb_ = by_operator(read_profiles(a)), by_operator(read_profiles(b))
    if pa_.empty or pb_.empty:
        return
    for point in changed:
        ids_a, ids_b = point.ids
        side_a = pa_[(pa_["stage"] == point.stage) & pa_["point_id"].isin(ids_a)]
        side_b = pb_[(pb_["stage"] == point.stage) & pb_["point_id"].isin(ids_b)]
        point.why = explain_change(_median_over_points(side_a), _median_over_points(side_b), limit)


def _median_over_points(ops: pd.DataFrame) -> pd.DataFrame:
    """One configuration's operators, the median over its repetitions (their point IDs)."""
    if ops.empty:
        return ops
    return ops.groupby(["phase", "operator"], as_index=False)["self_per_call_s"].median()
