"""Where a stage's jobs run: ``executor.resources`` merged for one stage.

A stage entry overrides ``default`` in exactly the fields it sets (fields left unset are null),
and ``default`` overrides :data:`~d5pipe.config.schema.RESOURCE_DEFAULTS`. Every reader of a
stage's resources (Snakemake rules, SLURM submission, level-3 rank launch) goes through
:func:`merged_resources`, so they all see the same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.config.schema import RESOURCE_DEFAULTS


def merged_resources(executor: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """Every resource of ``stage``'s jobs: its entry, else ``default``'s, else the schema's."""
    res = executor.get("resources", {}) or {}
    merged = dict(RESOURCE_DEFAULTS)
    for entry in (res.get("default"), res.get(stage)):
        merged.update({k: v for k, v in (entry or {}).items() if v is not None})
    return merged
