"""Where a stage's jobs run: ``executor.resources`` merged for one stage.

A stage entry overrides ``default`` in exactly the fields it sets (fields left unset are null),
and ``default`` overrides :data:`RESOURCE_DEFAULTS`. Every reader of a
stage's resources (Snakemake rules, SLURM submission, level-3 rank launch) goes through
:func:`merged_resources`, so they all see the same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RESOURCE_DEFAULTS: dict[str, Any] = {
    "partition": "", "account": "", "runtime_min": 30, "nodes": 1, "tasks": 1,
    "cpus_per_task": 1, "mem_mb": 2048, "gpus": 0,
}
"""What a resource takes when neither the stage's entry nor ``default`` sets it."""


def merged_resources(executor: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """Every resource of ``stage``'s jobs: its entry, else ``default``'s, else the schema's."""
    res = executor.get("resources", {}) or {}
    merged = dict(RESOURCE_DEFAULTS)
    for entry in (res.get("default"), res.get(stage)):
        merged.update({k: v for k, v in (entry or {}).items() if v is not None})
    return merged
