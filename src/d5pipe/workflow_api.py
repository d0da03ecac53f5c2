"""What the Snakefile asks d5pipe: the plan of the run directory it works in.

Snakemake runs with ``--directory RUN``; every path here is relative to that directory.
Each function is called by a one-line helper in ``workflow/rules/common.smk``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from d5pipe.schema.root import STAGES

_INDEX_CACHE: dict[str, dict[str, Any]] = {}


def load_index(run_dir: str | Path = ".") -> dict[str, Any]:
    """``plan/index.json`` of the run (cached per process)."""
    key = str(Path(run_dir).resolve())
    if key not in _INDEX_CACHE:
        with open(Path(run_dir) / "plan" / "index.json", encoding="utf-8") as fh:
            _INDEX_CACHE[key] = json.load(fh)
    return _INDEX_CACHE[key]


def enabled_stages(run_dir: str | Path = ".") -> list[str]:
    return [s for s in STAGES if s in load_index(run_dir)["stages"]]


def shard_markers(run_dir: str | Path = ".", stage: str | None = None) -> list[str]:
    """Marker files of every shard (of one stage, or of all enabled stages)."""
    idx = load_index(run_dir)
    stages = [stage] if stage else enabled_stages(run_dir)
    return [f"shards/{s}/{name}.json" for s in stages for name in idx["stages"][s]["shards"]]


def shard_datasets(run_dir: str | Path, stage: str, shard: str) -> list[str]:
    """Prepared dataset files the points of one shard need."""
    with open(Path(run_dir) / "plan" / stage / f"{shard}.json", encoding="utf-8") as fh:
        spec = json.load(fh)
    keys = sorted({p["dataset"] for p in spec["points"] if p.get("dataset")})
    return [f"data/{k}.npz" for k in keys]


def dataset_config(run_dir: str | Path, key: str) -> dict[str, Any]:
    cfg: dict[str, Any] = load_index(run_dir)["datasets"][key]
    return cfg


def final_outputs(run_dir: str | Path = ".") -> list[str]:
    return ["results.parquet", "report.html", "report.md"]


def executor_config(run_dir: str | Path = ".") -> dict[str, Any]:
    with open(Path(run_dir) / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    ex: dict[str, Any] = cfg.get("executor", {})
    return ex


def stage_resources(run_dir: str | Path, stage: str) -> dict[str, Any]:
    """Snakemake resources of a stage's shard jobs (SLURM names; ignored by the local executor)."""
    ex = executor_config(run_dir)
    if ex.get("name") != "slurm":
        return {}
    from d5pipe.slurm import snakemake_resources

    res = ex.get("resources", {}) or {}
    merged = dict(res.get("default", {}) or {})
    merged.update(res.get(stage, {}) or {})
    return snakemake_resources(merged)
