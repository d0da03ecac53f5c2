"""A run directory remembers its last plan, so re-running the same config does not re-plan it.

Planning a 10,000-point sweep costs about a second (every point's config checked by its stage,
hashed into its ID, seeded, costed). ``RUN/.d5pipe-plan.json`` keeps the plan that
``d5pipe run`` last wrote into RUN, keyed by everything planning depends on: the composed config
(its canonical hash), the source files of d5pipe itself (paths, sizes, mtimes: another d5pipe
re-plans) and the allow-list of the person running it. A hit means the same checks already
passed on the same input with the same code; any difference is a miss and a full
:func:`d5pipe.plan.build.build_plan`. Plans whose points use user code are never cached: their
IDs also depend on the users' sources, which only a full plan re-hashes. Machine-local, not part
of the bundle (d5pipe.provenance.bundle.EXCLUDED_FILES), read as JSON (never pickle).
"""

from __future__ import annotations

import json
import os
from array import array
from functools import lru_cache
from pathlib import Path
from typing import Any

from d5pipe.core.canonical import digest
from d5pipe.plan.build import PLAN_SCHEMA_VERSION, Plan, StagePlan

CACHE_FILE = ".d5pipe-plan.json"
CACHE_VERSION = 1


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Paths, sizes and mtimes of d5pipe's own ``.py`` files (one stat each)."""
    pkg = Path(__file__).resolve().parents[1]
    entries: list[tuple[str, int, int]] = []
    for root, dirs, files in os.walk(pkg):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                entries.append((os.path.relpath(os.path.join(root, name), pkg), st.st_size, st.st_mtime_ns))
    return digest(sorted(entries), 32)


def cache_key(config: dict[str, Any], more: dict[str, int] | None = None) -> str:
    from d5pipe.core.allowlist import allow_list

    return digest({"version": CACHE_VERSION, "plan_schema": PLAN_SCHEMA_VERSION, "config": digest(config),
                   "d5pipe": source_fingerprint(), "allow": list(allow_list()), "more": more or {}}, 32)


def _stage_to_json(sp: StagePlan) -> dict[str, Any]:
    return {"axes": list(sp.axes), "point_ids": sp.point_ids, "params": [list(p) for p in sp.params],
            "seeds": list(sp.seeds), "bounds": sp.bounds, "datasets": list(sp.datasets),
            "modules": [list(m) for m in sp.modules], "costs": list(sp.costs)}


def _stage_from_json(stage: str, d: dict[str, Any]) -> StagePlan:
    return StagePlan(stage, tuple(d["axes"]), list(d["point_ids"]), [tuple(p) for p in d["params"]],
                     array("q", [int(s) for s in d["seeds"]]), [int(b) for b in d["bounds"]], list(d["datasets"]),
                     [tuple(m) for m in d["modules"]], [float(c) for c in d["costs"]])


def store(run_dir: Path, plan: Plan) -> None:
    """Remember ``plan`` for ``run_dir`` (nothing for a plan with user code)."""
    from d5pipe.core.atomic import write_text

    path = Path(run_dir) / CACHE_FILE
    if plan.code:
        path.unlink(missing_ok=True)
        return
    data = {"key": cache_key(plan.config, plan.more), "more": plan.more, "experiment": plan.experiment, "root_seed": plan.root_seed,
            "config_hash": plan.config_hash, "axes": list(plan.axes), "datasets": plan.datasets,
            "stages": {s: _stage_to_json(sp) for s, sp in plan.stages.items()}}
    write_text(path, json.dumps(data), durable=False)


def load(run_dir: Path, config: dict[str, Any], more: dict[str, int] | None = None) -> Plan | None:
    """The plan remembered for ``run_dir`` when it was made from this very ``config`` (and these
    extra repetitions) by this d5pipe with this allow-list; None otherwise (also for a missing or
    unreadable file)."""
    try:
        data = json.loads((Path(run_dir) / CACHE_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("key") != cache_key(config, more):
            return None
        stages = {s: _stage_from_json(s, d) for s, d in data["stages"].items()}
        if list(stages) != list(config["stages"]):
            return None
        return Plan(experiment=str(data["experiment"]), root_seed=int(data["root_seed"]), config=config,
                    config_hash=str(data["config_hash"]), axes=tuple(data["axes"]), stages=stages,
                    datasets=dict(data["datasets"]), code={}, more=dict(more or {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None
