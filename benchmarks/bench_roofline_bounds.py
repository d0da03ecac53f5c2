"""Do the ceilings bound? (issue 25): the shipped experiments run ``--runs`` times, as shipped.

Each run's ``results.parquet`` is read for its ``pct_of_bound`` rows: the script prints, per
experiment and dtype, the highest ``pct_of_bound`` of each run with the lower end of its CI (the CI
of the rate it is a percentage of, as the ``above_bound`` plausibility check computes it), and the
``plausibility:above_bound`` findings. It ends with PASS when no point of any run is above 100% of
its bound beyond its CI, FAIL otherwise (exit 1). ``d5pipe peaks`` runs first and prints the
ceilings table and what measuring it cost (nothing when it is already cached).

    .venv/bin/python benchmarks/bench_roofline_bounds.py --runs 3 operator_sweep quickstart
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from d5pipe.results.plausibility import above_bound

ROOT = Path(__file__).resolve().parents[1]


def _d5pipe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "d5pipe.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)


def _dtype_of(run: Path, df: pd.DataFrame) -> pd.Series:
    """The dtype of each row: the swept column, else the run's configured ``operators.dtype``."""
    if "operators.dtype" in df.columns:
        return df["operators.dtype"].astype(str)
    conf = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    return pd.Series(str(conf.get("operators", {}).get("dtype", "float32")), index=df.index)


def bounds_of(run: Path) -> tuple[pd.DataFrame, int]:
    """Per dtype: the highest ``pct_of_bound`` (point, value, lower CI end) and the above_bound count."""
    df = pd.read_parquet(run / "results.parquet")
    df = df[df["stage"] == "level0"]
    pct = df[df["metric"] == "pct_of_bound"].assign(dtype=lambda d: _dtype_of(run, d))
    found = {f.point_id for f in above_bound(df)}
    rows = []
    for dtype, g in pct.groupby("dtype"):
        top = g.loc[g["value"].astype(float).idxmax()]
        rows.append({"dtype": dtype, "points": len(g), "max_pct_of_bound": float(top["value"]),
                     "point": str(top["point_id"]), "above_bound_beyond_ci": sum(p in found for p in g["point_id"])})
    flagged = int((df["metric"] == "plausibility:above_bound").sum())
    return pd.DataFrame(rows), flagged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiments", nargs="*", default=["operator_sweep", "quickstart"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    peaks = _d5pipe("peaks")
    print(peaks.stdout.rstrip())
    if peaks.returncode != 0:
        raise SystemExit(f"d5pipe peaks failed: {peaks.stderr[-2000:]}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="d5pipe-roof-") as tmp:
        work = args.keep or Path(tmp)
        for exp in args.experiments:
            for i in range(args.runs):
                out = work / f"{exp}{i}"
                t0 = time.perf_counter()
                r = _d5pipe("run", exp, "--out", str(out))
                wall = time.perf_counter() - t0
                if r.returncode not in (0, 3):
                    raise SystemExit(f"d5pipe run {exp} failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
                table, flagged = bounds_of(out)
                print(f"\n{exp} run {i + 1}/{args.runs} ({wall:.0f} s, exit {r.returncode}): "
                      f"{flagged} plausibility:above_bound finding(s)")
                print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
                failed |= flagged > 0 or bool((table["above_bound_beyond_ci"] > 0).any())
    print("\nFAIL: a point is above 100% of its bound beyond its CI" if failed
          else "\nPASS: no pct_of_bound above 100% beyond its CI, in any dtype, experiment or run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
