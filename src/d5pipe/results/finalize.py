"""After all shards: the tidy results with every check and verdict, and the completed manifest.

:func:`results_frame` is the one place that turns records into what users read: the records'
rows (d5pipe.results.aggregate), the recipe's acceptance verdicts evaluated with the **current**
config (d5pipe.results.acceptance) and each point's verdict (d5pipe.results.verdicts). The
aggregate job writes it (:func:`finalize_results`); ``d5pipe status`` and ``d5pipe report``
recompute it, so a changed ``recipe.acceptance`` changes verdicts without re-measuring anything.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from d5pipe.core.atomic import write_bytes
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.manifest import finalize_environment, merge_dataset_meta


def _nullable(table: pa.Table) -> pd.DataFrame:
    """Integers stay integers (nullable ``Int64``) where some rows have no value."""
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def with_checks(df: pd.DataFrame, config: dict[str, Any]) -> pd.DataFrame:
    """Acceptance verdict rows for ``config``'s recipe, plausibility rows
    (d5pipe.results.plausibility), then every row's point ``verdict``."""
    from d5pipe.results.acceptance import VERDICT_PREFIX, evaluate_acceptance
    from d5pipe.results.plausibility import with_plausibility
    from d5pipe.results.verdicts import with_verdict_column

    df = df[~df["metric"].astype(str).str.startswith(VERDICT_PREFIX)]  # re-evaluated, never kept
    acceptance = (config.get("recipe") or {}).get("acceptance") or []
    if acceptance and not df.empty:
        rows = evaluate_acceptance(df.drop(columns=["verdict"], errors="ignore"), acceptance)
        if not rows.empty:
            df = pd.concat([df, rows.astype({c: t for c, t in df.dtypes.items() if c in rows}, errors="ignore")],
                           ignore_index=True)
    df = with_plausibility(df.drop(columns=["verdict"], errors="ignore"), config)
    return with_verdict_column(df)


def results_frame(run_dir: Path) -> pd.DataFrame:
    """The run's results with checks and verdicts, in memory (nothing written)."""
    from d5pipe.results.aggregate import collect

    rd = RunDir(run_dir)
    table, _ = collect(rd.root, rd.planned_ids)
    return with_checks(_nullable(table), rd.config)


def with_accounting(df: pd.DataFrame, rd: RunDir) -> pd.DataFrame:
    """Join each point's SLURM job accounting (``slurm_*`` columns); write ``accounting.parquet``.

    Done once, by the report job: its shard jobs have all ended, so sacct's figures are final.
    """
    from d5pipe.results.accounting import COLUMNS, job_accounting, run_job_ids

    if "slurm_job_id" not in df.columns or df["slurm_job_id"].isna().all():
        return df
    since = str(rd.manifest.get("created") or "now-7days")[:19]
    ids = {*df["slurm_job_id"].dropna().unique(), *run_job_ids(str(rd.root), since)}
    acct, why = job_accounting(ids)
    write_frame(acct.assign(note=why), rd.side_table("accounting"))
    if acct.empty:
        return df
    extra = [c for c in COLUMNS if c != "slurm_job_id"]
    return df.drop(columns=extra, errors="ignore").merge(acct, on="slurm_job_id", how="left")


def with_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Level 3: each training point's ``speedup`` and ``efficiency`` against the 1-rank point of its
    configuration (d5pipe.levels.level3.scaling; CI from both times' CIs), as metrics of the point,
    so the report's scaling figures are data in results.parquet too. Nothing when the records carry
    them already or the run does not sweep ranks."""
    from d5pipe.levels.level3.scaling import TIME_METRIC, scaling_table

    l3 = df[df["stage"] == "level3"]
    if l3.empty or "distributed.ranks" not in df.columns or {"speedup", "efficiency"} & set(l3["metric"]):
        return df
    table = scaling_table(l3, TIME_METRIC)
    if table.empty or "point_id" not in table.columns:
        return df
    timed = l3[l3["metric"] == TIME_METRIC].drop_duplicates("point_id").set_index("point_id")
    new = []
    for metric in ("speedup", "efficiency"):
        t = table.dropna(subset=[metric]).drop_duplicates("point_id").set_index("point_id")
        ids = timed.index.intersection(t.index)
        if ids.empty:
            continue
        rows = timed.loc[ids].copy()
        rows["metric"], rows["value"] = metric, t.loc[ids, metric].astype(float)
        rows["ci_low"], rows["ci_high"] = t.loc[ids, f"{metric}_ci_low"].astype(float), t.loc[ids, f"{metric}_ci_high"].astype(float)
        rows["unit"], rows["kind"], rows["text"] = "", "numerical", None
        new.append(rows.reset_index())
    return pd.concat([df, *new], ignore_index=True) if new else df


def compute_comparisons(df: pd.DataFrame, rd: RunDir) -> pd.DataFrame:
    """Every side-by-side pair of the run (d5pipe.results.comparisons: the compared factor, the
    other axes, both medians, speedup with its CI, p-value, verdict and both sides' checks),
    computed once here: written as ``comparisons.parquet``, which the report reads."""
    from d5pipe.results.comparisons import comparisons, record_samples

    return comparisons(df, record_samples(rd.root), rd.config)


COMPARISON_PREFIXES = ("speedup:", "speedup_p:")
"""Metrics of a variant's points that carry its side-by-side comparison (``speedup:<metric>``:
speedup over the baseline with its CI, text the verdict; ``speedup_p:<metric>``: the p-value)."""


def with_comparison_rows(df: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Each compared pair as metrics of the variant configuration's points (every repetition), so
    results.parquet holds the speedups too: ``speedup:<metric>`` (value, CI, verdict in ``text``,
    the baseline in ``error``) and ``speedup_p:<metric>``."""
    from d5pipe.plan.point_config import REPEAT_AXIS
    from d5pipe.results.comparisons import stage_axes

    if pairs.empty:
        return df
    new = []
    for pair in pairs.itertuples(index=False):
        if pair.verdict == "not compared" or not pd.notna(pair.speedup):
            continue
        srows = df[df["stage"] == pair.stage]
        axes = [a for a in stage_axes(srows) if a != REPEAT_AXIS]
        ref = srows[srows["point_id"] == pair.variant_point]
        if ref.empty:
            continue
        key = ref.iloc[0][axes].astype(str)
        points = srows[(srows[axes].astype(str) == key).all(axis=1)].drop_duplicates("point_id")
        baseline = f"vs {pair.factor}={pair.baseline}"
        for metric, value, low, high, text, unit in (
                (f"speedup:{pair.metric}", pair.speedup, pair.ci_low, pair.ci_high, pair.verdict, "x"),
                (f"speedup_p:{pair.metric}", pair.p_value, None, None, None, "")):
            rows = points.copy()
            rows["metric"], rows["value"], rows["ci_low"], rows["ci_high"] = metric, float(value), low, high
            rows["text"], rows["unit"], rows["kind"], rows["error"] = text, unit, "info", baseline
            new.append(rows)
    if not new:
        return df
    extra = pd.concat(new, ignore_index=True).astype({c: t for c, t in df.dtypes.items()}, errors="ignore")
    return pd.concat([df, extra], ignore_index=True)


def write_frame(df: pd.DataFrame, path: Path) -> None:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False, compression="zstd")
    write_bytes(path, buf.getvalue())


def finalize_results(run_dir: Path, out: Path) -> Path:
    """Write ``results.parquet`` (+ side tables) with checks and verdicts; finish the manifest."""
    from d5pipe.results.aggregate import aggregate

    rd = RunDir(run_dir)
    merge_dataset_meta(rd.root)
    path = aggregate(rd.root, rd.planned_ids, Path(out))
    df = with_checks(_nullable(pq.read_table(path)), rd.config)
    df = with_scaling(df)
    df = with_accounting(df, rd)
    pairs = compute_comparisons(df, rd)
    df = with_comparison_rows(df, pairs)
    write_frame(df, path)
    write_frame(pairs, rd.side_table("comparisons"))
    hashes = df["env_hash"].dropna()
    ranked = [str(h) for h in hashes.value_counts().index if str(h)]
    finalize_environment(rd.root, ranked)
    return path


def write_verdict(run_dir: Path) -> Path:
    """``RUN/verdict.json``: the run's verdict from the results just written (the driver reads it)."""
    from dataclasses import asdict

    from d5pipe.core.atomic import write_json
    from d5pipe.results.verdicts import run_verdict

    rd = RunDir(run_dir)
    verdict = run_verdict(pd.read_parquet(rd.results_path))
    write_json(rd.verdict_path, {"schema_version": 1, **asdict(verdict)})
    return rd.verdict_path

