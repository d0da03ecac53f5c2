"""Level-independent report sections: stage tables and provenance (verdicts: verdict_sections.py)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from d5pipe.results.columns import COMPARISON_PREFIXES, stage_axes
from d5pipe.results.report.blocks import Pre, Section, Table, Text
from d5pipe.results.report.frames import fmt_plain, metric_names, varying_axes, wide_table
from d5pipe.results.report.loader import RunData

MAX_METRIC_COLUMNS = 8
MAX_SEEDS = 100


def main_metrics(rows: pd.DataFrame) -> list[str]:
    """Up to MAX_METRIC_COLUMNS metrics of a stage: those with a CI first, then the others."""
    names = metric_names(rows)
    ok = rows[rows["status"] == "ok"]
    with_ci = set(ok[ok["ci_low"].notna()]["metric"])
    info = set(ok[ok["kind"] == "info"]["metric"])
    ordered = [n for n in names if n in with_ci] + [n for n in names if n not in with_ci and n not in info]
    ordered = [n for n in ordered if not n.startswith(COMPARISON_PREFIXES)]  # the side-by-side's
    return ordered[:MAX_METRIC_COLUMNS]


def stage_table(data: RunData, stage: str) -> Section:
    rows = data.stage_rows(stage)
    axes = varying_axes(rows, repeat=True) or stage_axes(rows)
    cols, table_rows, total = wide_table(rows, main_metrics(rows), axes)
    blocks: list[Any] = [Table(cols, table_rows, f"{stage}: value per point; timings as median [95% CI of the median]")]
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


def report_built() -> str:
    """When this report was built (a rebuild by ``d5pipe report`` is later than the run's creation)."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def energy_fact(data: RunData) -> str:
    """How energy was measured (d5pipe.measure.energy), or "unavailable (<why>)"."""
    measured = int(data.results["metric"].astype(str).str.startswith("energy_per_").sum())
    record = (data.manifest.get("environment") or {}).get("energy") or {}
    if measured:
        how = f"{record.get('method')}: {record.get('caveat')}" if record.get("available") else "see each point's timer record"
        return f"{measured} value(s) measured ({how})"
    return f"unavailable ({record.get('reason', 'not recorded in this run')})"


def mlperf_fact(data: RunData) -> str:
    """The training points' MLPerf logs under MLPerf's compliance checker (d5pipe.measure.mllog_check)."""
    from d5pipe.measure.mllog_check import METRIC, NOT_APPLICABLE, RULESET

    rows = data.results[data.results["metric"] == METRIC]
    if rows.empty:
        return "no MLPerf training log (no training point, or mlperf.log false)"
    texts = rows["text"].astype(str) if "text" in rows.columns else rows["value"].astype(str)
    passed = int((texts == "pass").sum())
    return (f"{len(rows)} training log(s) in mlperf/: {passed} pass, {len(rows) - passed} fail MLPerf's compliance "
            f"checker (training {RULESET} common and open rules less {', '.join(NOT_APPLICABLE)}; d5pipe's rules)")


def repetitions_fact(data: RunData) -> str:
    """How the run's repetitions were started: forks of its fork server or fresh processes."""
    from d5pipe.config.schema import forks_repetitions

    if forks_repetitions(data.config.get("executor") or {}):
        return ("forks of the run's fork server (executor.fork_server): torch imported once, each fork with a "
                "heap layout of its own; that forks spread as much as fresh processes is not shown "
                "(docs/performance.md); each record's provenance.process_start says how it started")
    return "fresh processes, each its own interpreter"


def provenance(data: RunData) -> Section:
    m = data.manifest
    facts = [
        ["experiment", str(m.get("experiment", data.config.get("name", "")))],
        ["run created", str(m.get("created", ""))],
        ["report built", report_built()],
        ["d5pipe version", str(m.get("d5pipe_version", "unknown"))],
        ["config hash", str(m.get("config_hash", ""))],
        ["root seed", str(m.get("seed", data.config.get("seed", "")))],
        ["environment hash", str(m.get("env_hash", ""))],
        ["repetitions started as", repetitions_fact(data)],
        ["energy", energy_fact(data)],
        ["MLPerf logs", mlperf_fact(data)],
    ]
    hashes = sorted(str(h) for h in data.results["env_hash"].dropna().unique() if str(h))
    if len(hashes) > 1:  # the warning itself is under Warnings (several environments), once
        facts.append(["environment hashes of the results", ", ".join(hashes)])
    blocks: list[Any] = [Table(["item", "value"], facts)]
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
