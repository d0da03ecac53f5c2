"""Which target each pluggable choice of a point names: built-ins and user code on one path. Torch-free.

A **slot** is one pluggable choice of a config section: a selector key (``model.name``) picks a
built-in name or a key of the section's user registry (``model.custom``). Built-ins are declared
by the package that implements them (d5pipe.levels.declare.Builtin; ``mlp`` is ``{_target_:
d5pipe.levels.models.mlp, hidden: ..., dropout: ...}``, its arguments taken from the section), and
a slot reads those declarations: nothing here names a built-in, so :func:`target_of` gives one
mapping for either and the level code builds it with one call (d5pipe.levels.instantiate.build).

==================  ========================  ============================  =========================
slot                selector                  user registry                 built with
==================  ========================  ============================  =========================
operator            ``operators.op``          ``operators.custom``          (a spec object or factory)
model               ``model.name``            ``model.custom``              ``input_shape, n_classes``
model_reference     ``model.reference``       ``model.custom``              ``input_shape, n_classes``
dataset             ``dataset.name``          ``dataset.custom``            (nothing)
optimizer           ``train.optimizer``       ``train.custom_optimizers``   ``params``
reference_optimizer ``train.reference_optimizer`` ``train.custom_optimizers`` ``params``
scheduler           ``train.schedule``        ``train.custom_schedulers``   ``optimizer``
sampler             ``train.sampler``         ``train.custom_samplers``     ``n, labels, generator``
strategy            ``distributed.strategy``  ``distributed.custom_strategies`` (nothing)
runtime             ``level1.runtime``        ``level1.custom_runtimes``    (nothing)
framework           ``train.framework``       ``train.custom_frameworks``   ``model, dtype``
==================  ========================  ============================  =========================

Extra metrics (``train.metrics``) are a list of built-in names or targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from d5pipe.core.allowlist import TARGET_KEY, check_registry, check_selector, check_target, iter_targets, target_path
from d5pipe.core.errors import D5PipeError
from d5pipe.levels.config_checks import section as _section
from d5pipe.levels.declare import Builtin
from d5pipe.levels.level0.schema import OPERATORS
from d5pipe.levels.level1.runtimes import RUNTIMES
from d5pipe.levels.level1.schema import SECTION as LEVEL1_SECTION
from d5pipe.levels.level2.frameworks import FRAMEWORKS
from d5pipe.levels.level2.schema import METRICS, OPTIMIZERS, SAMPLERS, SCHEDULES
from d5pipe.levels.level3.schema import STRATEGIES
from d5pipe.levels.schema import DATASETS, MODELS


@dataclass(frozen=True)
class Slot:
    """One pluggable choice of a section."""

    section: str
    selector: str
    registry: str
    declared: Mapping[str, Builtin]
    """Its built-ins, as the package that implements them declares them (d5pipe.levels.declare)."""
    default: str
    """The schema default of the selector (a hand-made section may leave it out)."""
    optional: bool = False
    """An empty selector means "none" (e.g. no reference optimizer)."""

    @property
    def builtins(self) -> tuple[str, ...]:
        return tuple(self.declared)


SLOTS: dict[str, Slot] = {
    "operator": Slot("operators", "op", "custom", OPERATORS, "matmul"),
    "model": Slot("model", "name", "custom", MODELS, "mlp"),
    "model_reference": Slot("model", "reference", "custom", MODELS, "", optional=True),
    "dataset": Slot("dataset", "name", "custom", DATASETS, "digits"),
    "optimizer": Slot("train", "optimizer", "custom_optimizers", OPTIMIZERS, "adam"),
    "reference_optimizer": Slot("train", "reference_optimizer", "custom_optimizers", OPTIMIZERS, "", optional=True),
    "scheduler": Slot("train", "schedule", "custom_schedulers", SCHEDULES, "constant"),
    "sampler": Slot("train", "sampler", "custom_samplers", SAMPLERS, "shuffle"),
    "strategy": Slot("distributed", "strategy", "custom_strategies", STRATEGIES, "allreduce"),
    "runtime": Slot(LEVEL1_SECTION, "runtime", "custom_runtimes", RUNTIMES, "torch"),
    "framework": Slot("train", "framework", "custom_frameworks", FRAMEWORKS, "", optional=True),
}


def selected_name(section: Mapping[str, Any], slot_name: str) -> str:
    """The selector's value (the schema default when the section leaves it out)."""
    slot = SLOTS[slot_name]
    return str(section.get(slot.selector, slot.default) or "")


def registry(section: Mapping[str, Any], slot_name: str) -> Mapping[str, Any]:
    value = section.get(SLOTS[slot_name].registry) or {}
    return value if isinstance(value, Mapping) else {}


def check_slot(cfg: Mapping[str, Any], slot_name: str) -> None:
    """The slot's registry (names, targets, allow-list) and its selector; nothing is imported."""
    slot = SLOTS[slot_name]
    section = _section(cfg, slot.section)
    custom = section.get(slot.registry)
    check_registry(custom, f"{slot.section}.{slot.registry}", slot.builtins)
    name = selected_name(section, slot_name)
    if slot.optional and not name:
        return
    check_selector(name, f"{slot.section}.{slot.selector}", slot.builtins, registry(section, slot_name))


def check_metrics(train: Mapping[str, Any]) -> None:
    """``train.metrics``: built-in names or allowed targets."""
    metrics = train.get("metrics") or []
    if not isinstance(metrics, list):
        raise D5PipeError("config error: key 'train.metrics' must be a list")
    for i, entry in enumerate(metrics):
        if isinstance(entry, str) and entry in METRICS:
            continue
        check_target(entry, f"train.metrics[{i}]")


def check_slots(cfg: Mapping[str, Any], slots: tuple[str, ...]) -> None:
    """Every slot of ``slots`` (a level's, d5pipe.levels.stage.Level.slots)."""
    for slot_name in slots:
        check_slot(cfg, slot_name)


def user_target(section: Mapping[str, Any], slot_name: str) -> tuple[str, Any] | None:
    """``(key, target)`` of the user entry the slot selects; None for a built-in (or none)."""
    slot = SLOTS[slot_name]
    name = selected_name(section, slot_name)
    custom = registry(section, slot_name)
    if name and name in custom and name not in slot.builtins:
        return f"{slot.section}.{slot.registry}.{name}", custom[name]
    return None


def used_targets(cfg: Mapping[str, Any], slots: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of every user target the ``slots`` of a point select (nested ones
    too): what its code hash covers. Built-ins are d5pipe's own code (in the environment record)."""
    out: list[tuple[str, str]] = []
    for slot_name in slots:
        section = _section(cfg, SLOTS[slot_name].section)
        found = user_target(section, slot_name)
        if found is not None:
            out += list(iter_targets(found[1], found[0]))
    return out


def metric_user_targets(train: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, dotted path)`` of the user targets among ``train.metrics``."""
    out: list[tuple[str, str]] = []
    for i, entry in enumerate(train.get("metrics") or []):
        if not (isinstance(entry, str) and entry in METRICS):
            out += list(iter_targets(entry, f"train.metrics[{i}]"))
    return out


def as_mapping(value: Any, key: str) -> dict[str, Any]:
    """A target in its mapping form (the short string form becomes ``{_target_: path}``)."""
    if isinstance(value, str):
        return {TARGET_KEY: target_path(value, key)}
    if not isinstance(value, Mapping):
        raise D5PipeError(f"config error: key '{key}': {value!r} is not a target")
    out = dict(value)
    out[TARGET_KEY] = target_path(value, key)
    return out


def target_of(section: Mapping[str, Any], slot_name: str, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(key, target mapping)`` the slot selects (or ``name`` selects) in ``section``."""
    slot = SLOTS[slot_name]
    chosen = selected_name(section, slot_name) if name is None else name
    custom = registry(section, slot_name)
    if chosen in slot.builtins:
        return f"{slot.section}.{slot.selector}", slot.declared[chosen].target(section)
    if chosen in custom:
        key = f"{slot.section}.{slot.registry}.{chosen}"
        return key, as_mapping(custom[chosen], key)
    check_selector(chosen, f"{slot.section}.{slot.selector}", slot.builtins, custom)
    raise AssertionError("unreachable")


def metric_targets(train: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(key, target)`` of each entry of ``train.metrics``."""
    out = []
    for i, entry in enumerate(train.get("metrics") or []):
        key = f"train.metrics[{i}]"
        if isinstance(entry, str) and entry in METRICS:
            out.append((key, METRICS[entry].target({})))
        else:
            out.append((key, as_mapping(entry, key)))
    return out
