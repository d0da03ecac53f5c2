"""The results of a run, built in one pass from its records and written once.

:func:`build_results` is the one place that turns records into what users read. It reads each
record once (d5pipe.results.collect) and derives, in this order: the recipe's acceptance verdicts
evaluated with the **current** config (d5pipe.results.acceptance), the plausibility findings
(d5pipe.results.plausibility), level 3's speedup and efficiency per point, the SLURM accounting
(asked of sacct by the report job and ``d5pipe report``, else read from ``accounting.parquet``),
each point's verdict (d5pipe.results.verdicts, computed once), the side-by-side comparisons
(d5pipe.results.comparisons) as rows of the variants' points, and the run's verdict. It returns
one :class:`RunResults`; :func:`write_results` writes ``results.parquet``,
``summary_<stage>.parquet`` (with the verdicts), ``warnings.parquet``, ``curves.parquet``,
``comparisons.parquet``, ``accounting.parquet``, ``slurm_events.parquet`` and ``verdict.json`` from it, each once. The
report, ``d5pipe report``, ``d5pipe status`` and ``--junit`` take that value; a reader of a
finished run's ``results.parquet`` goes through d5pipe.results.columns.load_results. A changed
``recipe.acceptance`` changes verdicts on the next pass without re-measuring anything."""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from d5pipe.config.recipes import VERDICT_PREFIX
from d5pipe.core.atomic import write_bytes, write_json
from d5pipe.core.errors import D5PipeError
from d5pipe.core.outcome import Declared
from d5pipe.results.collect import SampleSource, collect, stage_summary
from d5pipe.results.columns import COMPARISON_PREFIXES, to_frame
from d5pipe.results.comparisons import comparisons
from d5pipe.results.plausibility import PREFIX as PLAUSIBILITY
from d5pipe.results.profiles import profile_frame
from d5pipe.results.run_warnings import run_warnings, warnings_frame
from d5pipe.results.verdicts import RunVerdict, point_verdicts, run_verdict
from d5pipe.rundir.layout import RunDir

RESULT_ROWS: dict[str, Declared] = {
    "status": Declared("", "info", None, "the one row of a point that failed or was skipped (status and error say "
                       "why)"),
    PLAUSIBILITY + "superlinear_speedup": Declared("", "verdict", None, "an impossible result, which fails the "
                                                   "point: a level-3 speedup above its ranks beyond its CI"),
    PLAUSIBILITY + "<check>": Declared("", "info", None, "a suspicious result, a warning that never changes a "
                                       "verdict (d5pipe.results.plausibility: oversubscribed, shared_host, "
                                       "target_missed, high_variation, ...); the evidence in error"),
    COMPARISON_PREFIXES[0] + "<metric>": Declared("x", "info", None, "a compared factor's variant against its baseline: "
                                                  "the speedup of metric, its CI, the verdict in text"),
    COMPARISON_PREFIXES[1] + "<metric>": Declared("", "info", None, "that comparison's p-value"),
    VERDICT_PREFIX + "<metric>": Declared("", "verdict", None, "recipe.acceptance: the rule on metric (value and "
                                          "unit: the metric's)"),
}
"""The rows this pass adds to any level's (beside a level's own, ``Level.metrics``), and what each means."""


@dataclass
class RunResults:
    """Everything the results of a run are, computed once."""

    run_dir: RunDir
    frame: pd.DataFrame
    """results.parquet: one row per point and metric, with checks, verdicts and speedups."""
    verdicts: pd.DataFrame
    """One row per point: stage, point_id, status, verdict, reason (d5pipe.results.verdicts)."""
    verdict: RunVerdict
    warnings: pd.DataFrame
    """Every warning the report shows, one row per (kind, stage, point): the columns of
    d5pipe.results.run_warnings.COLUMNS; written as ``warnings.parquet``."""
    curves: pd.DataFrame
    """stage, point_id, series, step, value."""
    profiles: pd.DataFrame
    """``profile.parquet`` (d5pipe.results.profiles.COLUMNS); empty when no point was profiled."""
    comparisons: pd.DataFrame
    """Every side-by-side pair (d5pipe.results.comparisons)."""
    samples: SampleSource
    """(stage, point_id, metric) -> the raw samples of the record, or None."""
    accounting: pd.DataFrame | None = None
    """The SLURM accounting of the run's jobs, else None."""
    incidents: pd.DataFrame | None = None
    """What happened to the run on SLURM (d5pipe.results.slurm_incidents), else None."""


def with_checks(df: pd.DataFrame, config: dict[str, Any]) -> pd.DataFrame:
    """Acceptance verdict rows for ``config``'s recipe, then plausibility rows
    (d5pipe.results.plausibility); earlier ones are dropped, never kept."""
    from d5pipe.results.acceptance import VERDICT_PREFIX, evaluate_acceptance
    from d5pipe.results.plausibility import with_plausibility

    df = df[~df["metric"].astype(str).str.startswith(VERDICT_PREFIX)].drop(columns=["verdict"], errors="ignore")
    acceptance = (config.get("recipe") or {}).get("acceptance") or []
    if acceptance and not df.empty:
        rows = evaluate_acceptance(df, acceptance)
        if not rows.empty:
            df = pd.concat([df, rows.astype({c: t for c, t in df.dtypes.items() if c in rows}, errors="ignore")],
                           ignore_index=True)
    return with_plausibility(df)


def build_results(run_dir: Path | RunDir, *, accounting: bool = False,
                  point_ids: dict[str, list[str]] | None = None) -> RunResults:
    """The run's results from its records, in memory (nothing written); ``accounting``: ask sacct
    for the SLURM jobs' figures. Of ``point_ids`` when given, else of the planned points when the run has a plan (a planned point without a record
    is ``not run``), else of every record."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir.of(run_dir)
    config = rd.config if rd.config_path.is_file() else {}
    if point_ids is None and rd.is_run():
        point_ids = rd.planned_ids
    table, cols = collect(rd.root, point_ids)
    if table.num_rows == 0:
        raise D5PipeError(f"{rd.root}: no point records and no plan (is it a d5pipe run directory?)")
    df = with_checks(with_derived(to_frame(table)), config)
    df, acct = with_accounting(df, rd, query=accounting)
    if acct is not None:
        from d5pipe.results.slurm_incidents import incidents

        happened = incidents(rd, acct, query=accounting)
    verdicts = point_verdicts(df)
    df = df.merge(verdicts[["stage", "point_id", "verdict"]], on=["stage", "point_id"], how="left")
    samples = cols.sample_source()
    found = warnings_frame(run_warnings(df, cols.warnings))
    pairs = comparisons(df, samples, config, verdicts=verdicts, looks=rd.looks)
    return RunResults(
        run_dir=rd, frame=with_comparison_rows(df, pairs), verdicts=verdicts, verdict=run_verdict(verdicts),
        warnings=found,
        curves=pd.DataFrame(cols.curves, columns=["stage", "point_id", "series", "step", "value"]),
        profiles=profile_frame(cols.profiles, rd),
        comparisons=pairs, samples=samples, accounting=acct, incidents=happened if acct is not None else None)


def with_accounting(df: pd.DataFrame, rd: RunDir, query: bool) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Join each point's SLURM job accounting (``slurm_*`` columns); also return the accounting
    table (with its ``note``), or None when no point ran under SLURM. ``query``: ask sacct (the
    report job, once its shard jobs have all ended, so the figures are final; ``d5pipe report``),
    else take what ``accounting.parquet`` holds."""
    from d5pipe.results.accounting import COLUMNS, job_accounting, run_job_ids

    if "slurm_job_id" not in df.columns or df["slurm_job_id"].isna().all():
        return df, None
    if query:
        from d5pipe.results.slurm_incidents import run_since

        acct, why = job_accounting({*df["slurm_job_id"].dropna().unique(), *run_job_ids(str(rd.root), run_since(rd))})
        acct = acct.assign(note=why)
    elif rd.side_table("accounting").is_file():
        acct = pd.read_parquet(rd.side_table("accounting"))
    else:
        return df, None
    if acct.empty:
        return df, acct
    extra = [c for c in COLUMNS if c != "slurm_job_id"]
    joined = df.drop(columns=extra, errors="ignore").merge(acct.drop(columns=["note"], errors="ignore"),
                                                           on="slurm_job_id", how="left")
    return joined, acct


def with_derived(df: pd.DataFrame) -> pd.DataFrame:
    """Each level's derived rows (``derive`` of d5pipe.levels.stage.Level: level 3's speedup and
    efficiency against its 1-rank point), computed once from the level's rows of this run."""
    from d5pipe.levels.registry import LEVELS

    derived = [level.derive(rows) for level in LEVELS
               if level.derive is not None and not (rows := df[df["stage"] == level.name]).empty]
    new = [extra for extra in derived if extra is not None and not extra.empty]
    return pd.concat([df, *new], ignore_index=True) if new else df


def with_comparison_rows(df: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Each compared pair as metrics of the variant configuration's points (every repetition), so
    results.parquet holds the speedups too: ``speedup:<metric>`` (value, CI, verdict in ``text``,
    the baseline in ``error``) and ``speedup_p:<metric>``."""
    from d5pipe.plan.point_config import REPEAT_AXIS
    from d5pipe.results.columns import stage_axes

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


def write_results(res: RunResults) -> Path:
    """Write every file of :class:`RunResults` once; returns the path of ``results.parquet``."""
    rd = res.run_dir
    write_frame(res.frame, rd.results_path)
    for stage in sorted(res.frame["stage"].dropna().unique()):
        write_frame(stage_summary(res.frame, str(stage)), rd.side_table(f"summary_{stage}"))
    write_frame(res.warnings, rd.side_table("warnings"))
    write_frame(res.curves, rd.side_table("curves"))
    if not res.profiles.empty:
        write_frame(res.profiles, rd.side_table("profile"))
    write_frame(res.comparisons, rd.side_table("comparisons"))
    if res.accounting is not None:
        write_frame(res.accounting, rd.side_table("accounting"))
    if res.incidents is not None:
        write_frame(res.incidents, rd.side_table("slurm_events"))
    write_json(rd.verdict_path, {"schema_version": 1, **asdict(res.verdict)})
    return rd.results_path
