"""Writing a plan into a run directory before Snakemake runs (paths: d5pipe.rundir.layout).

``config.yaml``, ``overrides.yaml``, ``plan/index.json`` and ``plan/<stage>/<shard>.json`` are
written only when their content changed, so their mtimes (and Snakemake's view) stay stable.
Shard markers whose points lack a record are removed, so Snakemake re-runs exactly those shards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from d5pipe.core.atomic import write_if_changed
from d5pipe.core.yamlio import safe_dump
from d5pipe.plan.build import PLAN_SCHEMA_VERSION, Plan
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, read_record


def plan_index(plan: Plan) -> dict[str, Any]:
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "experiment": plan.experiment,
        "config_hash": plan.config_hash,
        "stages": {
            s: {"shards": sp.shard_names(), "points": len(sp.point_ids), "axes": list(sp.axes)}
            for s, sp in plan.stages.items()
        },
        "datasets": plan.datasets,
        "builds": plan.builds,
    }


def shard_spec(plan: Plan, stage: str, index: int) -> dict[str, Any]:
    sp = plan.stages[stage]
    pts = [{"point_id": sp.point_ids[i], "params": sp.params_dict(i), "seed": sp.seeds[i], "dataset": sp.datasets[i],
            **({"builds": needed} if (needed := sp.point_builds(i)) else {})}
           for i in sp.shard_slice(index)]
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "experiment": plan.experiment,
        "stage": stage,
        "shard": sp.shard_names()[index],
        "points": pts,
    }


def write_plan(run_dir: Path, plan: Plan, overrides: list[str]) -> None:
    """Write config, overrides and the plan files; unchanged files keep their mtime."""
    rd = RunDir.of(run_dir)
    rd.root.mkdir(parents=True, exist_ok=True)
    rd.write_file(rd.config_path, safe_dump(plan.config, sort_keys=False, default_flow_style=None).encode())
    write_if_changed(
        rd.overrides_path,
        safe_dump({"experiment": plan.experiment, "overrides": list(overrides)}).encode(),
    )
    for stage, sp in plan.stages.items():
        for i, name in enumerate(sp.shard_names()):
            rd.write_json(rd.shard_plan(stage, name), shard_spec(plan, stage, i))
    rd.write_json(rd.checks_path, checks_config(plan))
    rd.write_json(rd.index_path, plan_index(plan))


def checks_config(plan: Plan) -> dict[str, Any]:
    """The config that verdicts are evaluated with, not part of any point's ID: changing it
    re-runs aggregation and the report, never a measurement."""
    recipe = plan.config.get("recipe") or {}
    return {"schema_version": PLAN_SCHEMA_VERSION, "acceptance": list(recipe.get("acceptance") or [])}


def existing_records(run_dir: Path, stage: str) -> set[str]:
    """Point IDs whose record file exists (one directory listing, not one stat per point)."""
    return RunDir.of(run_dir).existing_records(stage)


def invalidate_stale_markers(run_dir: Path, plan: Plan) -> list[str]:
    """Delete shard markers whose points lack a record, so Snakemake re-runs exactly those shards."""
    rd = RunDir.of(run_dir)
    removed = []
    for stage, sp in plan.stages.items():
        mtimes = rd.record_mtimes(stage)
        for i, name in enumerate(sp.shard_names()):
            marker = rd.marker(stage, name)
            try:
                marked = marker.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            ids = [sp.point_ids[j] for j in sp.shard_slice(i)]
            if any(pid not in mtimes for pid in ids) or any(
                    mtimes[pid] > marked and _corrupt(rd, stage, pid) for pid in ids):
                marker.unlink()
                removed.append(f"{stage}/{name}")
    return removed


def _corrupt(rd: RunDir, stage: str, pid: str) -> bool:
    """A record (written after its shard finished, by something else) that does not parse."""
    try:
        read_record(rd.record(stage, pid))
    except (FileNotFoundError, CorruptRecord):
        return True
    return False


def remove_failed(run_dir: Path, plan: Plan) -> int:
    """Delete records of failed points (``--retry-failed``)."""
    rd = RunDir.of(run_dir)
    n = 0
    for stage, sp in plan.stages.items():
        for pid in sp.point_ids:
            path = rd.record(stage, pid)
            try:
                status = read_record(path).get("status")
            except (FileNotFoundError, CorruptRecord):
                continue
            if status == "failed":
                path.unlink()
                n += 1
    return n
