"""One point's config from the composed config: the stage's sections with the axis values set.

Plain dicts only, no OmegaConf and no validation imports: the planner (d5pipe.plan.build) and
every shard job (d5pipe.execute.shard) build a point's config with these, and a shard job
should not import the config schema to do so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.fields import neutral_defaults
from d5pipe.levels.registry import SECTION_SCHEMAS, STAGES
from d5pipe.levels.schema import DatasetConf, ModelConf

REPEAT_AXIS = "repeat"
"""The axis a plan adds when ``repetitions`` > 1: the repetition index (0, 1, ...) of a point.
Each repetition is measured in a separate shard job, with its own derived seed (its ID hashes the
index); it is not a config key, so a repetition's config is its point's."""


def stage_repetitions(config: Mapping[str, Any], stage: str) -> int:
    """Processes per point of ``stage``: the config's ``repetitions`` when set, else the level's own
    (:attr:`d5pipe.levels.stage.Level.repetitions`)."""
    value = config.get("repetitions")
    return int(value) if value is not None else STAGES[stage].repetitions


def fewest_repetitions(config: Mapping[str, Any]) -> int:
    """The fewest processes per point over the config's stages (the until-decided mode's first look)."""
    return min((stage_repetitions(config, s) for s in config.get("stages") or () if s in STAGES),
               default=int(config.get("repetitions") or 1))


def set_dotted(cfg: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Return a copy of ``cfg`` with ``key`` (dotted) set; copies only along the path."""
    parts = key.split(".")
    out = dict(cfg)
    node = out
    for p in parts[:-1]:
        child = node.get(p)
        child = dict(child) if isinstance(child, dict) else {}
        node[p] = child
        node = child
    node[parts[-1]] = value
    return out


IDENTITY_SCHEMAS: dict[str, type] = {**SECTION_SCHEMAS, "model": ModelConf, "dataset": DatasetConf}
"""The sections whose :func:`d5pipe.core.fields.later` fields stage_base leaves out at their default:
the levels' own and the ``model``/``dataset`` sections they share."""


def stage_base(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """The part of the config a stage reads (its sections, plus name and root seed). Fields added
    after IDs were published (d5pipe.core.fields.later) are left out at their default: the point
    computes what it computed before they existed, and keeps its ID."""
    base = {s: config[s] for s in STAGES[stage].sections if s in config}
    for section, values in list(base.items()):
        schema = IDENTITY_SCHEMAS.get(section)
        neutral = neutral_defaults(schema) if schema is not None else None
        if neutral and isinstance(values, Mapping):
            base[section] = {k: v for k, v in values.items() if k not in neutral or v != neutral[k]}
    if base.get("placement") in ({"node": 0}, None, {}):  # the default: not part of the point's identity
        base.pop("placement", None)
    base["name"] = config["name"]
    base["seed"] = config["seed"]
    return base


def point_config(base: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    cfg = base
    for k, v in params.items():
        if k != REPEAT_AXIS:
            cfg = set_dotted(cfg, k, v)
    return cfg
