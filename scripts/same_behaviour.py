"""Whether a change left a shipped experiment's behaviour as it was: two run directories of the same
experiment (one per code version) compared on point IDs, each stage's metric names, every point's
verdict and every side-by-side verdict (issue 57's "behaviour unchanged").

Timings differ from run to run; a side-by-side verdict that moves between a direction and
``inconclusive`` at a few repetitions is noise, one that reverses (faster against slower) is not:
the lines say which pairs moved, with both ratios.

Usage: python scripts/same_behaviour.py RUN_BEFORE RUN_AFTER
(e.g. ``PYTHONPATH=<worktree>/src d5pipe run quickstart --out runs/before`` in a worktree of the
commit before, the same with the commit after).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

KEY = ["stage", "factor", "metric", "baseline", "variant", "context"]


def main(before: Path, after: Path) -> int:
    ra, rb = (pd.read_parquet(d / "results.parquet") for d in (before, after))
    print(f"points: {ra.point_id.nunique()} / {rb.point_id.nunique()}; same point IDs: "
          f"{set(ra.point_id) == set(rb.point_id)}")
    for stage in sorted(set(ra.stage) | set(rb.stage)):
        ma, mb = set(ra[ra.stage == stage].metric), set(rb[rb.stage == stage].metric)
        moved = "" if ma == mb else f"; only before: {sorted(ma - mb)}; only after: {sorted(mb - ma)}"
        print(f"  {stage}: metric names {'the same' if ma == mb else 'differ'} ({len(ma)}/{len(mb)}){moved}")
    va, vb = (r.groupby("point_id")["verdict"].first() for r in (ra, rb))
    common = va.index.intersection(vb.index)
    differ = [(p, va[p], vb[p]) for p in common if va[p] != vb[p]]
    print(f"  point verdicts: {len(common)} compared, {len(differ)} differ {differ}")
    ca, cb = (pd.read_parquet(d / "comparisons.parquet") if (d / "comparisons.parquet").exists() else
              pd.DataFrame(columns=[*KEY, "verdict", "speedup"]) for d in (before, after))
    pairs = ca[[*KEY, "verdict", "speedup"]].merge(cb[[*KEY, "verdict", "speedup"]], on=KEY, how="outer",
                                                   suffixes=("_a", "_b"))
    moved_pairs = pairs[pairs.verdict_a != pairs.verdict_b]
    print(f"  side-by-side verdicts: {len(pairs)} pairs, {len(pairs) - len(moved_pairs)} the same")
    for row in moved_pairs.itertuples():
        print(f"    {row.stage} {row.factor} {row.metric} {row.baseline} -> {row.variant} [{row.context}]: "
              f"{row.verdict_a} x{row.speedup_a:.3g} -> {row.verdict_b} x{row.speedup_b:.3g}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
