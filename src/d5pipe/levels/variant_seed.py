"""The seed that the variants of one configuration share (Fair comparisons: same inputs and weights).

A point's own seed derives from its ID, so two points that differ only in a compared factor would
start from other weights and draw other batches. :func:`variant_seed` gives them one seed instead,
when the experiment sweeps or sets one of the level's *variant keys*: a seed derived from the root
seed and the point's config and sweep values without those keys (the repetition included, so
repetitions still differ). A point that uses none of them keeps its own seed: what was computed
before a level declared such keys is computed again.
"""

from __future__ import annotations

from collections.abc import Mapping

from d5pipe.core.canonical import canonical_json
from d5pipe.core.fields import default_of, setting
from d5pipe.core.seeds import derive_seed
from d5pipe.levels.contract import PointContext

VariantKeys = Mapping[str, tuple[type, tuple[str, ...]]]
"""Section -> (its schema, the keys whose variants share a seed)."""


def variant_seed(ctx: PointContext, keys: VariantKeys, label: str) -> tuple[int, str]:
    """(seed, how it was found) for ``ctx`` (see the module docstring); ``label`` names the level's use."""
    dotted = {f"{section}.{k}" for section, (_, names) in keys.items() for k in names}
    used = any(k in dotted for k in ctx.params) or any(
        setting(ctx.config.get(section), schema, k) != default_of(schema, k)
        for section, (schema, names) in keys.items() for k in names)
    if not used:
        return ctx.seed, "the point seed"
    config = {section: dict(values) for section, values in ctx.config.items() if isinstance(values, dict)}
    for section, (_, names) in keys.items():
        for k in names:
            config.get(section, {}).pop(k, None)
    identity = canonical_json({"root": ctx.config.get("seed", 0), "stage": ctx.stage, "config": config,
                               "params": {k: v for k, v in ctx.params.items() if k not in dotted}})
    return derive_seed(int(ctx.config.get("seed", 0)), f"{label}:" + identity), \
        "shared by the variants that differ only in " + ", ".join(sorted(dotted))
