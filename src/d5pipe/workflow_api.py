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
_CONFIG_CACHE: dict[str, dict[str, Any]] = {}


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


def load_config(run_dir: str | Path = ".") -> dict[str, Any]:
    """``config.yaml`` of the run (parsed once per process: every rule and shard asks)."""
    key = str(Path(run_dir).resolve())
    if key not in _CONFIG_CACHE:
        with open(Path(run_dir) / "config.yaml", encoding="utf-8") as fh:
            _CONFIG_CACHE[key] = yaml.safe_load(fh)
    return _CONFIG_CACHE[key]


def executor_config(run_dir: str | Path = ".") -> dict[str, Any]:
    ex: dict[str, Any] = load_config(run_dir).get("executor", {})
    return ex


def _stage_resource_conf(ex: dict[str, Any], stage: str) -> dict[str, Any]:
    """Every resource of a stage's jobs: its entry, else ``default``'s, else the schema's.

    Fields a config leaves unset are null, so ``level0.runtime_min=1`` keeps ``default.partition``
    and ``level0.cpus_per_task=1`` wins over ``default.cpus_per_task=8``.
    """
    from d5pipe.schema.root import RESOURCE_DEFAULTS

    res = ex.get("resources", {}) or {}
    merged = dict(RESOURCE_DEFAULTS)
    for entry in (res.get("default"), res.get(stage)):
        merged.update({k: v for k, v in (entry or {}).items() if v is not None})
    return merged


def threads_of(ex: dict[str, Any], stage: str) -> int:
    """CPU threads of one of a stage's jobs: ``executor.resources.<stage>.cpus_per_task``.

    With any executor: Snakemake gives a rule's ``threads`` to the job as ``OMP_NUM_THREADS``
    (and the MKL/OpenBLAS/... equivalents), which torch reads at import, so this is how many
    intra-op threads every measurement of the stage uses (recorded in the shard's environment).
    """
    from d5pipe.slurm import resource_int

    return resource_int(_stage_resource_conf(ex, stage), "cpus_per_task", 1, f"executor.resources.{stage}")


def max_threads(ex: dict[str, Any]) -> int:
    """The most threads any stage's job asks for (the local executor's cores per job slot)."""
    return max(threads_of(ex, stage) for stage in ("prepare_data", *STAGES))


def stage_threads(run_dir: str | Path, stage: str) -> int:
    """The ``threads:`` of a stage's rule (see :func:`threads_of`)."""
    return threads_of(executor_config(run_dir), stage)


def stage_resources(run_dir: str | Path, stage: str, per_shard_tasks: bool = False) -> dict[str, Any]:
    """Snakemake resources of a stage's shard jobs (SLURM names; ignored by the local executor).

    ``per_shard_tasks``: leave ``tasks`` and ``mpi`` out; the rule sets them per shard with
    :func:`shard_tasks` and :func:`shard_mpi` (level 3: one job per shard, one task per rank).
    """
    ex = executor_config(run_dir)
    if ex.get("name") != "slurm":
        return {}
    from d5pipe.slurm import snakemake_resources

    out = snakemake_resources(_stage_resource_conf(ex, stage))
    if per_shard_tasks:
        out.pop("tasks", None)
        out.pop("mpi", None)
    return out


def shard_tasks(run_dir: str | Path, stage: str, shard: str) -> int:
    """SLURM tasks of a shard's job: the most ``distributed.ranks`` among its points.

    At least the configured ``executor.resources.<stage>.tasks``; 1 when the stage has no
    ``distributed`` section. The points of a shard run one after another inside the job, each
    starting its ranks with ``srun -n <ranks>`` in that allocation.
    """
    from d5pipe.plan import point_config, stage_base

    config = load_config(run_dir)
    with open(Path(run_dir) / "plan" / stage / f"{shard}.json", encoding="utf-8") as fh:
        spec = json.load(fh)
    base = stage_base(config, stage)
    configured = int(_stage_resource_conf(config.get("executor", {}) or {}, stage).get("tasks", 1) or 1)
    ranks = [
        int(point_config(base, p["params"]).get("distributed", {}).get("ranks", 1) or 1)
        for p in spec["points"]
    ]
    return max([configured, *ranks])


def shard_mpi(run_dir: str | Path, stage: str, shard: str) -> str:
    """The plugin's ``mpi`` resource for a shard: ``"srun"`` when its job has several tasks.

    Empty otherwise (snakemake-executor-plugin-slurm rejects ``mpi`` with one task); either way
    the rule then runs directly in the batch step, not inside ``srun -n1``.
    """
    from d5pipe.slurm import SRUN_LAUNCHER

    return SRUN_LAUNCHER if shard_tasks(run_dir, stage, shard) > 1 else ""
