"""The run directory: layout, and writing a plan into it before Snakemake runs.

Layout (``RUN`` = the run directory)::

    RUN/config.yaml                    composed, resolved config
    RUN/overrides.yaml                 the experiment name and command-line overrides
    RUN/manifest.json                  provenance (d5pipe.manifest)
    RUN/plan/index.json                stages, shards, datasets (read by the Snakefile)
    RUN/plan/<stage>/<shard>.json      the points of one shard (ID, params, seed, dataset)
    RUN/data/<dataset_key>.npz         prepared datasets
    RUN/points/<stage>/<point_id>.json one record per point, written atomically
    RUN/shards/<stage>/<shard>.json    shard completion markers (Snakemake outputs)
    RUN/work/<stage>/<point_id>/       per-point scratch (step logs, rank outputs)
    RUN/logs/<rule>/...                Snakemake job logs
    RUN/results.parquet, RUN/report.html, RUN/report.md
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from d5pipe.atomic import write_if_changed
from d5pipe.canonical import canonical_json
from d5pipe.plan import PLAN_SCHEMA_VERSION, Plan
from d5pipe.records import record_path


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
    }


def shard_spec(plan: Plan, stage: str, index: int) -> dict[str, Any]:
    sp = plan.stages[stage]
    pts = []
    for i in sp.shard_slice(index):
        pts.append(
            {
                "point_id": sp.point_ids[i],
                "params": sp.params_dict(i),
                "seed": sp.seeds[i],
                "dataset": sp.datasets[i],
            }
        )
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "experiment": plan.experiment,
        "stage": stage,
        "shard": sp.shard_names()[index],
        "points": pts,
    }


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def write_plan(run_dir: Path, plan: Plan, overrides: list[str]) -> None:
    """Write config, overrides and the plan files; unchanged files keep their mtime."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_if_changed(
        run_dir / "config.yaml",
        yaml.safe_dump(plan.config, sort_keys=False, default_flow_style=None).encode(),
    )
    write_if_changed(
        run_dir / "overrides.yaml",
        yaml.safe_dump({"experiment": plan.experiment, "overrides": list(overrides)}).encode(),
    )
    for stage, sp in plan.stages.items():
        for i in range(sp.n_shards):
            write_if_changed(
                run_dir / "plan" / stage / f"{sp.shard_names()[i]}.json",
                _dump(shard_spec(plan, stage, i)),
            )
    write_if_changed(run_dir / "plan" / "index.json", _dump(plan_index(plan)))


def existing_records(run_dir: Path, stage: str) -> set[str]:
    """Point IDs whose record file exists (one directory listing, not one stat per point)."""
    d = run_dir / "points" / stage
    try:
        return {n[:-5] for n in os.listdir(d) if n.endswith(".json")}
    except FileNotFoundError:
        return set()


def invalidate_stale_markers(run_dir: Path, plan: Plan) -> list[str]:
    """Delete shard markers whose points lack a record, so Snakemake re-runs exactly those shards."""
    removed = []
    for stage, sp in plan.stages.items():
        done = existing_records(run_dir, stage)
        for i, name in enumerate(sp.shard_names()):
            marker = run_dir / "shards" / stage / f"{name}.json"
            if not marker.exists():
                continue
            if any(sp.point_ids[j] not in done for j in sp.shard_slice(i)):
                marker.unlink()
                removed.append(f"{stage}/{name}")
    return removed


def remove_failed(run_dir: Path, plan: Plan) -> int:
    """Delete records of failed points (``--retry-failed``)."""
    n = 0
    for stage, sp in plan.stages.items():
        for pid in sp.point_ids:
            p = record_path(run_dir, stage, pid)
            try:
                with open(p, encoding="utf-8") as fh:
                    status = json.load(fh).get("status")
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            if status == "failed":
                p.unlink()
                n += 1
    return n


def config_fingerprint(config: dict[str, Any]) -> str:
    return canonical_json(config)
