"""Compose an experiment's config with Hydra and check every value (d5pipe.config.validate).

Every config error becomes one :class:`D5PipeError` line naming the key (and the config file
where Hydra tells us which one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from d5pipe.config.schema import register
from d5pipe.config.validate import check_config
from d5pipe.core.errors import D5PipeError, exception_chain


def package_conf_dir() -> Path:
    """The ``conf/`` directory shipped with d5pipe (repository root, or $D5PIPE_CONF_DIR)."""
    env = os.environ.get("D5PIPE_CONF_DIR")
    if env:
        return Path(env).resolve()
    return (Path(__file__).resolve().parents[3] / "conf").resolve()


def _available_experiments(dirs: list[Path]) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / "experiment").glob("*.yaml")})


_FULL_KEY = re.compile(r"full_key:\s*(\S+)")
_NOT_IN = re.compile(r"Key '[^']+' not in '[^']+'")
_IN_FILE = re.compile(r"(?:^|\n)In '([^']+)':")


def _explain(exc: BaseException, experiment: str) -> str:
    """Turn a Hydra/OmegaConf exception chain into one line naming key and file."""
    if "LexerNoViableAltException" in str(exc) or "mismatched input" in str(exc):
        text = str(exc).splitlines()[0].split(":", 1)[-1].strip()
        return (f"config error: override {text!r} cannot be parsed (quote a value with spaces or "
                f"special characters: key='a b') (experiment '{experiment}')")
    chain = exception_chain(exc)
    key = None
    where = None
    reason = None
    for e in chain:
        text = str(e)
        if key is None:
            fk, m = getattr(e, "full_key", None), _FULL_KEY.search(text)
            key = str(fk) if fk else m.group(1) if m else None
        if where is None and (m := _IN_FILE.search(text)):
            where = m.group(1)
        if reason is None and isinstance(e, OmegaConfBaseException):
            reason = text.splitlines()[0] if text else type(e).__name__
    if reason is None:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    reason = reason.strip()
    if key and _NOT_IN.match(reason):  # OmegaConf's "Key 'x' not in 'Level1Conf'": say what is valid
        from d5pipe.config.validate import unknown_key

        reason = unknown_key(key)
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
    """Compose ``experiment`` with ``overrides``; every value checked (d5pipe.config.validate).

    ``config_dirs`` are extra directories searched before the shipped ``conf/``: users keep
    their own ``experiment/*.yaml`` (and other groups) there.
    """
    return _compose(experiment, overrides, config_dirs)[0]


def compose_plain(
    experiment: str,
    overrides: list[str] | None = None,
    config_dirs: list[str | Path] | None = None,
) -> dict[str, Any]:
    """As :func:`compose_config`, as plain resolved data (what the planner reads)."""
    return _compose(experiment, overrides, config_dirs)[1]


def _compose(
    experiment: str,
    overrides: list[str] | None,
    config_dirs: list[str | Path] | None,
) -> tuple[DictConfig, dict[str, Any]]:
    register()
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
    try:
        plain = to_plain(cfg)
    except D5PipeError:
        raise
    except Exception as exc:
        raise D5PipeError(_explain(exc, experiment)) from exc
    check_swept_overrides(plain, overrides)
    try:
        check_config(plain)
    except D5PipeError as exc:
        raise D5PipeError(f"{exc} (experiment '{experiment}')") from exc
    return cfg, plain


def override_key(override: str) -> str:
    """The dotted key of a Hydra override (``+a.b=1``, ``~a.b``, ``++a.b=1`` -> ``a.b``)."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def check_swept_overrides(config: dict[str, Any], overrides: list[str]) -> None:
    """A plain override of a key the sweep varies would be silently replaced by the sweep's
    values on every point; it is an error that says how to narrow the axis instead."""
    from d5pipe.config.validate import sweep_axes

    axes = {axis: where for where, axis, _ in sweep_axes(config.get("sweep") or {})}
    for o in overrides:
        key = override_key(o)
        if key.startswith("sweep"):
            continue
        for axis, where in axes.items():
            if key == axis or axis.startswith(key + ".") or key.startswith(axis + "."):
                fix = (f"use 'sweep.grid.{axis}=[...]' to narrow or replace the axis"
                       if where.startswith("sweep.grid") else "change that sweep.zip group in the experiment")
                raise D5PipeError(f"override {o!r}: key '{axis}' is a sweep axis ({where}), so this "
                                  f"value would be ignored; {fix}")


_AXIS_OVERRIDE = re.compile(r"^(sweep\.grid)\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+)=(.*)$", re.S)


def split_axis_overrides(overrides: list[str]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Pull out ``sweep.grid.<dotted axis>=[values]`` overrides, which Hydra would read as nesting.

    ``d5pipe run scaling 'sweep.grid.distributed.ranks=[1,2]'`` narrows one axis of the sweep;
    an axis the experiment does not sweep yet is added (``'sweep.grid.train.lr=[0.01,0.1]'``).
    """
    matches = [(o, _AXIS_OVERRIDE.match(o)) for o in overrides]
    return [o for o, m in matches if m is None], [(o, m.group(2), m.group(3)) for o, m in matches if m is not None]


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




def to_plain(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The resolved config as plain Python data (resolve once; points vary plain data)."""
    if isinstance(cfg, dict):
        return cfg
    data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}
