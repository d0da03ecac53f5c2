"""Level-independent report sections: overview, failures, warnings, stage tables, provenance."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from d5pipe.results.report.blocks import Pre, Section, Table, Text
from d5pipe.results.report.frames import (
    MAX_TABLE_ROWS,
    fmt_plain,
    metric_names,
    stage_axes,
    varying_axes,
    wide_table,
)
from d5pipe.results.report.loader import RunData

HIGH_VARIATION = 0.10
"""A timing whose CI of the median is wider than this fraction of the median is flagged."""
MAX_METRIC_COLUMNS = 8
MAX_SEEDS = 100


def overview(data: RunData) -> Section:
    res = data.results
    pts = res.drop_duplicates(["stage", "point_id"])
    counts = pts.groupby(["stage", "status"]).size().unstack(fill_value=0)
    cols = [c for c in ("ok", "failed", "skipped") if c in counts.columns]
    rows = [[stage, *[str(int(counts.loc[stage, c])) for c in cols], str(int(counts.loc[stage].sum()))]
            for stage in counts.index]
    bad = {i for i, stage in enumerate(counts.index) if "failed" in cols and counts.loc[stage, "failed"] > 0}
    blocks: list[Any] = [Table(["stage", *cols, "points"], rows, "Points per stage and status", bad)]
    desc = data.config.get("description")
    if desc:
        blocks.insert(0, Text(str(desc)))
    return Section("overview", "Overview", blocks)


def failures(data: RunData) -> Section | None:
    """Failed, then skipped points, with their error text and parameters; None when there are none."""
    res = data.results
    bad = res[res["status"] != "ok"].drop_duplicates(["stage", "point_id"])
    if bad.empty:
        return None
    bad = bad.assign(_order=(bad["status"] != "failed").astype(int)).sort_values(["_order", "stage", "point_id"])
    axes = data.axis_columns
    rows = []
    for _, r in bad.head(MAX_TABLE_ROWS).iterrows():
        params = ", ".join(f"{a}={fmt_plain(r[a])}" for a in axes if pd.notna(r[a]))
        rows.append([r["stage"], r["point_id"], r["status"], params, str(r["error"] or "")])
    n_failed = int((bad["status"] == "failed").sum())
    n_skipped = len(bad) - n_failed
    blocks: list[Any] = [
        Text(f"{n_failed} point(s) failed and {n_skipped} were skipped; the sweep went on.",
             "bad" if n_failed else "warn"),
        Table(["stage", "point_id", "status", "parameters", "error"], rows,
              bad_rows={i for i, r in enumerate(rows) if r[2] == "failed"}),
    ]
    if len(bad) > MAX_TABLE_ROWS:
        blocks.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(bad)}; all are in results.parquet.", "note"))
    return Section("failures", "Failures", blocks)


def _flag_rows(data: RunData) -> list[list[str]]:
    res = data.results[data.results["status"] == "ok"]
    out: list[list[str]] = []
    for r in data.warnings.itertuples(index=False):
        kind = "oversubscription" if "oversubscri" in r.warning.lower() else "warning"
        out.append([kind, r.stage, r.point_id, r.warning])
    timing = res[(res["kind"] == "timing") & res["value"].notna() & res["ci_low"].notna()
                 & res["ci_high"].notna() & (res["value"] != 0)]
    rel = (timing["ci_high"] - timing["ci_low"]) / timing["value"].abs()
    for r in timing.assign(relw=rel)[rel > HIGH_VARIATION].itertuples(index=False):
        out.append(["high variation", r.stage, r.point_id,
                    f"{r.metric}: 95% CI width is {100 * r.relw:.0f}% of the median"])
    missed = res[(res["metric"] == "target_met") & (res["value"] == 0)]
    for r in missed.itertuples(index=False):
        out.append(["missed CI target", r.stage, r.point_id, "the timer stopped before reaching its CI target"])
    over = res[(res["metric"] == "oversubscribed") & (res["value"] == 1)]
    for r in over.itertuples(index=False):
        out.append(["oversubscription", r.stage, r.point_id, "more ranks/threads than cores"])
    return out


def warnings(data: RunData) -> Section | None:
    rows = _flag_rows(data)
    if not rows:
        return None
    counts = pd.Series([r[0] for r in rows]).value_counts()
    blocks: list[Any] = [Text("; ".join(f"{k}: {v}" for k, v in counts.items()), "warn"),
                         Table(["kind", "stage", "point_id", "detail"], rows[:MAX_TABLE_ROWS])]
    if len(rows) > MAX_TABLE_ROWS:
        blocks.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(rows)} warnings.", "note"))
    return Section("warnings", "Warnings", blocks)


def main_metrics(rows: pd.DataFrame) -> list[str]:
    """Up to MAX_METRIC_COLUMNS metrics of a stage: those with a CI first, then the others."""
    names = metric_names(rows)
    ok = rows[rows["status"] == "ok"]
    with_ci = set(ok[ok["ci_low"].notna()]["metric"])
    info = set(ok[ok["kind"] == "info"]["metric"])
    ordered = [n for n in names if n in with_ci] + [n for n in names if n not in with_ci and n not in info]
    return ordered[:MAX_METRIC_COLUMNS]


def stage_table(data: RunData, stage: str) -> Section:
    rows = data.stage_rows(stage)
    axes = varying_axes(rows) or stage_axes(rows)
    cols, table_rows, total = wide_table(rows, main_metrics(rows), axes)
    blocks: list[Any] = [Table(cols, table_rows, f"{stage}: median [95% CI of the median] per point")]
    if total > len(table_rows):
        blocks.append(Text(f"Showing {len(table_rows)} of {total} points; all are in results.parquet "
                           f"and summary_{stage}.parquet.", "note"))
    return Section(f"table-{stage}", f"{stage}: main metrics", blocks)


def _seed_rows(data: RunData) -> tuple[list[list[str]], int]:
    seeds = data.manifest.get("seeds")
    pairs: list[tuple[str, str, str]] = []
    if isinstance(seeds, dict):
        for stage, per_point in seeds.items():
            if isinstance(per_point, dict):
                pairs.extend((str(stage), str(p), str(s)) for p, s in per_point.items())
    else:
        pts = data.results.drop_duplicates(["stage", "point_id"])
        pairs = [(r.stage, r.point_id, fmt_plain(r.seed)) for r in pts.itertuples(index=False)]
    return [list(p) for p in pairs[:MAX_SEEDS]], len(pairs)


def provenance(data: RunData) -> Section:
    m = data.manifest
    facts = [
        ["experiment", str(m.get("experiment", data.config.get("name", "")))],
        ["created", str(m.get("created", ""))],
        ["d5pipe version", str(m.get("d5pipe_version", "unknown"))],
        ["config hash", str(m.get("config_hash", ""))],
        ["root seed", str(m.get("seed", data.config.get("seed", "")))],
        ["environment hash", str(m.get("env_hash", ""))],
    ]
    hashes = sorted(str(h) for h in data.results["env_hash"].dropna().unique())
    blocks: list[Any] = [Table(["item", "value"], facts)]
    if len(hashes) > 1:
        blocks.append(Text(f"Results come from {len(hashes)} different environments: {', '.join(hashes)}", "warn"))
    rep = data.reproduce
    if rep is not None:
        verdict = rep.get("verdict", rep.get("reproduced", "unknown"))
        ok = rep.get("reproduced") is True or str(verdict).lower() in ("reproduced", "true", "pass")
        blocks.append(Text(f"Reproduction verdict: {verdict}", "good" if ok else "bad"))
        blocks.append(Pre(json.dumps(rep, indent=2, sort_keys=True, default=str), "reproduce.json"))
    seed_rows, n_seeds = _seed_rows(data)
    blocks.append(Table(["stage", "point_id", "seed"], seed_rows, "Per-point seeds (derived from the root seed)"))
    if n_seeds > len(seed_rows):
        blocks.append(Text(f"Showing {len(seed_rows)} of {n_seeds} seeds; all are in manifest.json.", "note"))
    env = m.get("environment")
    if env is not None:
        blocks.append(Pre(json.dumps(env, indent=2, sort_keys=True, default=str), "Environment record"))
    if data.config_text:
        blocks.append(Pre(data.config_text, "Composed config (config.yaml)"))
    return Section("provenance", "Provenance", blocks)
