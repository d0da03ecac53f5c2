"""Repetitions until decided: configurations whose timing comparison is inconclusive get more.

Two callers: ``d5pipe run --until-decided`` (the side-by-side pairs of one run, both the
baseline's and the variant's configuration) and ``d5pipe ab --until-decided`` (each configuration
of both sides). A round asks, for every undecided configuration, for more repetitions: at most
double what it has, up to the comparison's estimate of what would decide it
(:func:`d5pipe.results.timing_compare.repetitions_needed`), at most ``max_repetitions``. The counts
go into ``RUN/plan/repetitions.json`` (d5pipe.plan.build.build_plan's ``more``), so the next run of
the same command measures exactly the new repetitions, in new processes, in a random order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.core.canonical import canonical_json
from d5pipe.results.compare import GroupKey, RunComparison, groups, load_points
from d5pipe.rundir.layout import RunDir

if TYPE_CHECKING:
    import pandas as pd


def next_count(have: int, needed: float | int | None, max_repetitions: int) -> int:
    """Repetitions to ask for next: at most double, up to ``needed``, at most ``max_repetitions``."""
    want = have + 1 if needed is None or not math.isfinite(float(needed)) else int(needed)
    return min(max_repetitions, have + max(1, min(want - have, have)))


def grow(run_dir: Path, wants: Mapping[GroupKey, int], looks: int = 1) -> int:
    """Raise the repetitions of the configurations in ``wants`` (group key -> count) in
    ``run_dir``'s ``plan/repetitions.json``, with the planned ``looks`` of the until-decided mode
    (its comparisons test each look at alpha / looks); returns how many grew."""
    rd = RunDir.of(run_dir)
    more = dict(rd.more_repetitions)
    grown = 0
    for gkey, reps in groups(load_points(run_dir, fastest=False)).items():
        target = wants.get(gkey, 0)
        if target > len(reps):
            more[f"{gkey[0]}/{reps[min(reps)].point_id}"] = target
            grown += 1
    if grown:
        set_looks(run_dir, looks, more)
    return grown


def set_looks(run_dir: Path, looks: int, more: Mapping[str, int] | None = None) -> None:
    """Record the planned looks of the until-decided mode (before its first decision), and the
    repetitions ``more`` of configurations (default: those recorded)."""
    rd = RunDir.of(run_dir)
    rd.plan_dir.mkdir(parents=True, exist_ok=True)
    groups = dict(rd.more_repetitions if more is None else more)
    rd.write_json(rd.repetitions_path, {"schema_version": 1, "groups": groups, "looks": looks}, indent=1)


def wants_of_comparison(comparison: RunComparison, max_repetitions: int) -> dict[GroupKey, int]:
    """Every configuration with an inconclusive timing (two runs compared) -> its next count."""
    want: dict[GroupKey, int] = {}
    for p in comparison.points:
        for t in p.timings:
            if t.verdict != "inconclusive" or t.derived_from or t.needed is None and t.reason:
                continue
            have = max(len(t.a.values), len(t.b.values))
            key = (p.stage, canonical_json(p.params))
            want[key] = max(want.get(key, 0), next_count(have, t.needed, max_repetitions))
    return want


def _inconclusive_pairs(run_dir: Path) -> pd.DataFrame:
    """The run's side-by-side pairs whose verdict is inconclusive (none without the table)."""
    import pandas as pd

    path = RunDir.of(run_dir).side_table("comparisons")
    pairs = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
    return pairs[pairs["verdict"] == "inconclusive"] if not pairs.empty else pairs


def wants_of_pairs(run_dir: Path, max_repetitions: int) -> dict[GroupKey, int]:
    """Both configurations of every inconclusive side-by-side pair of one run -> next count."""
    pairs = _inconclusive_pairs(run_dir)
    if pairs.empty:
        return {}
    points = load_points(run_dir, fastest=False)
    key_of = {pid: (p.stage, canonical_json({k: v for k, v in p.params.items() if k != "repeat"}))
              for (_, pid), p in points.items()}
    sizes = {k: len(v) for k, v in groups(points).items()}
    want: dict[GroupKey, int] = {}
    for row in pairs.itertuples(index=False):
        for pid in (row.baseline_point, row.variant_point):
            key = key_of.get(str(pid))
            if key is not None:
                want[key] = max(want.get(key, 0), next_count(sizes[key], row.needed, max_repetitions))
    return want


def undecided(run_dirs: Iterable[Path]) -> list[str]:
    """``stage/variant vs baseline metric (context)`` of every inconclusive side-by-side pair."""
    return [f"{row.stage}/{row.variant} vs {row.baseline} {row.metric}" + (f" ({row.context})" if row.context else "")
            for run_dir in run_dirs for row in _inconclusive_pairs(run_dir).itertuples(index=False)]
