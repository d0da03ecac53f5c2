"""A stage's d5pipe resources as snakemake-executor-plugin-slurm resources.

The merge of ``executor.resources`` (stage entry over ``default`` over the schema's defaults) is
d5pipe.core.stage_resources.merged_resources; this module checks the merged values and maps them to
the names the plugin reads (``slurm_partition``, ``slurm_account``, ``runtime``, ``nodes``,
``tasks``, ``cpus_per_task``, ``mem_mb``, ``gpu``, ``mpi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from d5pipe.config.schema import ResourcesConf
from d5pipe.core.errors import D5PipeError
from d5pipe.core.stage_resources import RESOURCE_DEFAULTS

RESOURCE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ResourcesConf))
"""The keys of ``executor.resources.<stage>`` (d5pipe names)."""

SRUN_LAUNCHER = "srun"
"""Value of the plugin's ``mpi`` resource for multi-task jobs: the rule starts its own ranks."""


def resource_int(stage_res: Mapping[str, Any], key: str, minimum: int,
                 where: str = "executor.resources") -> int:
    """``stage_res[key]`` checked to be an integer >= ``minimum`` (error names ``where.key``)."""
    value = stage_res[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise D5PipeError(f"{where}.{key}: {value!r} is not an integer >= {minimum}")
    return value


def snakemake_resources(stage_res: Mapping[str, Any]) -> dict[str, Any]:
    """Map one stage's d5pipe resources to snakemake-executor-plugin-slurm resource names.

    Missing or null keys take :data:`~d5pipe.core.stage_resources.RESOURCE_DEFAULTS`. Empty ``partition``/``account`` and
    ``gpus: 0`` are left out (SLURM's default partition; no ``-A``; no ``--gpus``). A job with
    ``tasks > 1`` also gets ``mpi: "srun"``: the plugin then allocates ``--ntasks=tasks`` and
    runs the rule directly in the batch step instead of inside ``srun -n1``, so the rule can
    start its ranks with ``srun -n <tasks>`` in the same allocation (one SLURM job per point).
    """
    unknown = sorted(set(stage_res) - set(RESOURCE_KEYS))
    if unknown:
        raise D5PipeError(
            f"executor.resources: unknown key {unknown[0]!r}; known: {', '.join(RESOURCE_KEYS)}")
    merged: dict[str, Any] = dict(RESOURCE_DEFAULTS)
    merged.update({k: v for k, v in stage_res.items() if v is not None})
    for key in ("partition", "account"):
        if not isinstance(merged[key], str):
            raise D5PipeError(f"executor.resources.{key}: {merged[key]!r} is not a string")
    out: dict[str, Any] = {name: resource_int(merged, key, 1) for name, key in (
        ("runtime", "runtime_min"), ("nodes", "nodes"), ("tasks", "tasks"), ("cpus_per_task", "cpus_per_task"),
        ("mem_mb", "mem_mb"))}
    gpus = resource_int(merged, "gpus", 0)
    out.update({f"slurm_{key}": merged[key] for key in ("partition", "account") if merged[key]})
    if gpus:
        out["gpu"] = gpus
        # Without this the plugin passes --ntasks-per-gpu=<tasks>, multiplying the task count.
        out["tasks_per_gpu"] = 0
    if out["tasks"] > 1:
        out["mpi"] = SRUN_LAUNCHER
    return out
