"""Compose and validate an experiment's config with Hydra, before any task starts.

Every config error becomes one :class:`D5PipeError` line naming the key (and the config file
where Hydra tells us which one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from d5pipe.errors import D5PipeError
from d5pipe.schema.root import STAGES, D5Config

_REGISTERED = False


def package_conf_dir() -> Path:
    """The ``conf/`` directory shipped with d5pipe (repository root, or $D5PIPE_CONF_DIR)."""
    env = os.environ.get("D5PIPE_CONF_DIR")
    if env:
        return Path(env).resolve()
    return (Path(__file__).resolve().parents[2] / "conf").resolve()


def register_schema() -> None:
    """Register the structured-config schema in Hydra's ConfigStore (idempotent)."""
    global _REGISTERED
    if not _REGISTERED:
        ConfigStore.instance().store(name="d5pipe_schema", node=D5Config)
        _REGISTERED = True


def _available_experiments(dirs: list[Path]) -> list[str]:
    names: set[str] = set()
    for d in dirs:
        exp = d / "experiment"
        if exp.is_dir():
            names.update(p.stem for p in exp.glob("*.yaml"))
    return sorted(names)


_FULL_KEY = re.compile(r"full_key:\s*(\S+)")
_IN_FILE = re.compile(r"(?:^|\n)In '([^']+)':")


def _explain(exc: BaseException, experiment: str) -> str:
    """Turn a Hydra/OmegaConf exception chain into one line naming key and file."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    key = None
    where = None
    reason = None
    for e in chain:
        text = str(e)
        if key is None:
            fk = getattr(e, "full_key", None)
            if fk:
                key = str(fk)
            else:
                m = _FULL_KEY.search(text)
                if m:
                    key = m.group(1)
        if where is None:
            m = _IN_FILE.search(text)
            if m:
                where = m.group(1)
        if reason is None and isinstance(e, OmegaConfBaseException):
            reason = text.splitlines()[0] if text else type(e).__name__
    if reason is None:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    reason = reason.strip()
    parts = ["config error"]
    if key:
        parts.append(f"key '{key}'")
    if where:
        parts.append(f"in {where}.yaml" if not where.endswith(".yaml") else f"in {where}")
    return f"{' '.join(parts)}: {reason} (experiment '{experiment}')"


def compose_config(
    experiment: str,
    overrides: list[str] | None = None,
    config_dirs: list[str | Path] | None = None,
) -> DictConfig:
    """Compose ``experiment`` with ``overrides`` and validate it against the schema.

    ``config_dirs`` are extra directories searched before nothing else: users keep their own
    ``experiment/*.yaml`` (and other groups) there.
    """
    register_schema()
    overrides = list(overrides or [])
    main_dir = package_conf_dir()
    extra: list[Path] = []
    for d in config_dirs or []:
        p = Path(d).resolve()
        if not p.is_dir():
            raise D5PipeError(f"--config-dir {d}: not a directory")
        extra.append(p)
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", experiment) or ".." in experiment:
        raise D5PipeError(f"experiment name {experiment!r}: use letters, digits, _ . - /")
    available = _available_experiments([main_dir, *extra])
    if experiment not in available:
        raise D5PipeError(
            f"unknown experiment '{experiment}' (available: {', '.join(available) or 'none'}; "
            "add your own with --config-dir DIR holding experiment/NAME.yaml)"
        )
    for o in overrides:
        if "=" not in o:
            raise D5PipeError(f"override {o!r}: expected key=value")
        if o.lstrip("+~").startswith("hydra"):
            raise D5PipeError(f"override {o!r}: hydra.* settings are not overridable here")
    overrides, axis_overrides = split_axis_overrides(overrides)
    search = [f"file://{p}" for p in extra]
    hydra_overrides = [f"hydra.searchpath=[{','.join(search)}]"] if search else []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(main_dir), version_base="1.3"):
            cfg = compose(
                config_name="config",
                overrides=[*hydra_overrides, f"experiment={experiment}", *overrides],
            )
    except D5PipeError:
        raise
    except Exception as exc:  # Hydra/OmegaConf composition errors are user errors
        raise D5PipeError(_explain(exc, experiment)) from exc
    finally:
        GlobalHydra.instance().clear()
    apply_axis_overrides(cfg, axis_overrides)
    validate(cfg, experiment)
    return cfg


_AXIS_OVERRIDE = re.compile(r"^(sweep\.grid)\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+)=(.*)$", re.S)


def split_axis_overrides(overrides: list[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Pull out ``sweep.grid.<dotted axis>=[values]`` overrides, which Hydra would read as nesting.

    ``d5pipe run scaling 'sweep.grid.distributed.ranks=[1,2]'`` narrows one axis of the sweep;
    an axis the experiment does not sweep yet is added (``'sweep.grid.train.lr=[0.01,0.1]'``).
    """
    rest: list[str] = []
    axes: list[tuple[str, str, str]] = []
    for o in overrides:
        m = _AXIS_OVERRIDE.match(o)
        if m:
            axes.append((o, m.group(2), m.group(3)))
        else:
            rest.append(o)
    return rest, axes


def apply_axis_overrides(cfg: DictConfig, axes: list[tuple[str, str, str]]) -> None:
    import yaml

    for text, axis, raw in axes:
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise D5PipeError(f"override {text!r}: cannot parse the value list") from exc
        if not isinstance(value, list):
            value = [value]
        try:
            with open_dict(cfg.sweep.grid):  # a new axis is fine; validate() checks its key
                cfg.sweep.grid[axis] = value
        except Exception as exc:
            raise D5PipeError(f"override {text!r}: {str(exc).splitlines()[0]}") from exc


def validate(cfg: DictConfig, experiment: str) -> None:
    """Checks the schema cannot express: required values present, stages known."""
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except Exception as exc:
        raise D5PipeError(_explain(exc, experiment)) from exc
    if not cfg.stages:
        raise D5PipeError(f"config error: key 'stages' is empty (experiment '{experiment}')")
    for s in cfg.stages:
        if s not in STAGES:
            raise D5PipeError(
                f"config error: key 'stages' has unknown stage '{s}' "
                f"(known: {', '.join(STAGES)}; experiment '{experiment}')"
            )
    validate_sweep_values(cfg)
    if "level0" in cfg.stages:
        from d5pipe.level0 import validate_operators  # lazy: imports torch

        ops = OmegaConf.to_container(cfg.operators, resolve=True)
        assert isinstance(ops, dict)
        validate_operators({str(k): v for k, v in ops.items()})
    acceptance = OmegaConf.to_container(cfg.recipe.acceptance, resolve=True)
    if acceptance:
        from d5pipe.recipes import validate_acceptance

        assert isinstance(acceptance, list)
        validate_acceptance(acceptance)  # ops and stages checked before any task runs
    if cfg.shards.points_per_shard < 1:
        raise D5PipeError("config error: key 'shards.points_per_shard' must be >= 1")
    from d5pipe.workflow_api import max_threads

    executor = OmegaConf.to_container(cfg.executor, resolve=True)
    assert isinstance(executor, dict)
    max_threads({str(k): v for k, v in executor.items()})  # every stage's cpus_per_task >= 1


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain Python data (resolve once; points vary plain data)."""
    data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}


def _axis_value_lists(sweep: Any) -> list[tuple[str, str, list[Any]]]:
    out: list[tuple[str, str, list[Any]]] = []
    for axis, values in (sweep.get("grid") or {}).items():
        out.append((f"sweep.grid.{axis}", str(axis), list(values)))
    for i, group in enumerate(sweep.get("zip") or []):
        for axis, values in group.items():
            out.append((f"sweep.zip[{i}].{axis}", str(axis), list(values)))
    return out


def validate_sweep_values(cfg: DictConfig) -> None:
    """Type-check every distinct sweep value against the schema, once per value (not per point)."""
    sweep = OmegaConf.to_container(cfg.sweep, resolve=True)
    assert isinstance(sweep, dict)
    for where, axis, values in _axis_value_lists(sweep):
        parent_key, _, leaf = axis.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else None
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue  # unknown keys are reported by the planner with the axis name
        probe = parent.copy()
        for v in values:
            try:
                probe[leaf] = v
            except Exception as exc:
                first = str(exc).splitlines()[0]
                raise D5PipeError(f"{where}: value {v!r} does not fit key '{axis}': {first}") from exc
