"""Plug-ins: what a ``_target_`` may name, and who decides which modules may be imported. Torch-free.

Everything a user brings (operators, models, datasets, optimizers, LR schedulers, distributed
strategies, metrics) is a **target**: a mapping with Hydra's ``_target_`` key and its arguments,
``{_target_: mypkg.models.MyNet, width: 64}`` (``hydra.utils.instantiate`` semantics: nested
mappings with a ``_target_`` are built first), or the short form ``"mypkg.models:MyNet"``
(``"mypkg.models.MyNet"`` works too), which is ``{_target_: mypkg.models.MyNet}``.

**The allow-list is the trust decision of the person running d5pipe, never the config's.** A target is imported only
when its dotted path lies under an allowed prefix. The prefixes come from, and only from:

* the command line: ``--allow PREFIX`` (repeatable) on ``d5pipe run``/``plan``/``reproduce``;
* the environment: ``D5PIPE_ALLOW=prefix1,prefix2`` (the CLI exports its ``--allow`` values
  there, so Snakemake's jobs and the level-3 ranks inherit them);
* a user-level file outside every experiment: ``$XDG_CONFIG_HOME/d5pipe/allow.yaml`` (default
  ``~/.config/d5pipe/allow.yaml``) holding ``allow: [prefix, ...]`` (or a bare list);
* ``d5pipe`` itself, always.

A prefix is a package or module name (``mypkg``, ``mypkg.models``; a trailing ``.`` is accepted):
it admits itself and what lies below it, never ``mypkg_evil``. Importing ``mypkg.models`` runs
``mypkg/__init__.py`` too, so allowing a subpackage trusts its parents' ``__init__`` modules.
An experiment config or a bundle can name targets but cannot widen the list; every target is
checked here before anything is imported (:func:`check_target`), at ``d5pipe plan`` time and again
where it is built (d5pipe.levels.instantiate).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.user_dirs import user_config_dir

ENV_VAR = "D5PIPE_ALLOW"
ALWAYS_ALLOWED: tuple[str, ...] = ("d5pipe",)
TARGET_KEY = "_target_"
HYDRA_KEYS: frozenset[str] = frozenset({"_target_", "_args_", "_partial_", "_convert_", "_recursive_"})

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_COLON = re.compile(rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*$")


def user_allow_file() -> Path:
    """``allow.yaml`` in the user's config directory (``$XDG_CONFIG_HOME/d5pipe``, else
    ``~/.config/d5pipe`` on Linux; d5pipe.core.user_dirs)."""
    return user_config_dir() / "allow.yaml"


def normalise_prefix(prefix: Any, where: str) -> str:
    """``mypkg.`` -> ``mypkg``; anything that is not a dotted Python name is a one-line error."""
    text = str(prefix).strip() if isinstance(prefix, str) else ""
    text = text[:-1] if text.endswith(".") else text
    if not _DOTTED.match(text):
        raise D5PipeError(f"{where}: allow-list entry {prefix!r} is not a package or module name "
                          "(letters, digits, _ and dots, e.g. mypkg or mypkg.models)")
    return text


@lru_cache(maxsize=8)
def _file_prefixes(path: str, mtime_ns: int) -> tuple[str, ...]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise D5PipeError(f"{path}: cannot read the allow-list ({exc})") from None
    items = data.get("allow") if isinstance(data, dict) else data
    if items is None:
        return ()
    if not isinstance(items, list):
        raise D5PipeError(f"{path}: expected 'allow: [prefix, ...]'")
    return tuple(normalise_prefix(p, path) for p in items)


def file_prefixes() -> tuple[str, ...]:
    """The prefixes of the user-level allow file (none when it does not exist)."""
    path = user_allow_file()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return ()
    return _file_prefixes(str(path), mtime)


def env_prefixes() -> tuple[str, ...]:
    """The prefixes of ``$D5PIPE_ALLOW`` (comma-separated)."""
    raw = os.environ.get(ENV_VAR, "")
    return tuple(normalise_prefix(p, ENV_VAR) for p in raw.split(",") if p.strip())


def allow_list() -> tuple[str, ...]:
    """Every allowed prefix, ``d5pipe`` first, each once."""
    return tuple(dict.fromkeys((*ALWAYS_ALLOWED, *env_prefixes(), *file_prefixes())))


def allow(prefixes: Iterable[str], where: str = "--allow") -> tuple[str, ...]:
    """Add ``prefixes`` (from the command line) to ``$D5PIPE_ALLOW`` of this process, which its
    children inherit; returns the whole allow-list."""
    extra = [normalise_prefix(p, where) for p in prefixes]
    if extra:
        os.environ[ENV_VAR] = ",".join(dict.fromkeys([*env_prefixes(), *extra]))
    return allow_list()


def module_allowed(dotted: str, prefixes: Sequence[str]) -> bool:
    """True when ``dotted`` is one of the prefixes or lies below one (``mypkg`` admits
    ``mypkg.models.MyNet``, never ``mypkg_evil``)."""
    packages = (prefix.removesuffix(".") for prefix in prefixes)
    return any(package and (dotted == package or dotted.startswith(package + ".")) for package in packages)


def target_path(value: Any, key: str) -> str:
    """The dotted path a target names: ``_target_`` of a mapping or the short string form."""
    raw = value.get(TARGET_KEY) if isinstance(value, Mapping) else value
    where = f"{key}.{TARGET_KEY}" if isinstance(value, Mapping) else key
    if not isinstance(raw, str) or not (_DOTTED.match(raw) or _COLON.match(raw)) or "." not in raw.replace(":", "."):
        raise D5PipeError(f"config error: key '{where}': {raw!r} is not an importable path "
                          "(use package.module.Name or package.module:Name)")
    return raw.replace(":", ".")


def iter_targets(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """``(key, dotted path)`` of a target and of every target nested in its arguments."""
    yield from ((where, path) for where, path, _raw in _iter_raw(value, key))


def _iter_raw(value: Any, key: str) -> Iterator[tuple[str, str, str]]:
    if isinstance(value, str):
        yield key, target_path(value, key), value
        return
    if not isinstance(value, Mapping):
        raise D5PipeError(f"config error: key '{key}': {value!r} is not a target "
                          "(a mapping with _target_, or 'package.module:Name')")
    if TARGET_KEY not in value:
        raise D5PipeError(f"config error: key '{key}': a target needs a '{TARGET_KEY}' key")
    yield key, target_path(value, key), str(value[TARGET_KEY])
    yield from _nested(value, key)


def _nested(value: Any, key: str) -> Iterator[tuple[str, str, str]]:
    items: Iterable[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = ((str(k), v) for k, v in value.items() if k != TARGET_KEY)
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return
    for sub, v in items:
        where = f"{key}{sub}" if sub.startswith("[") else f"{key}.{sub}"
        if isinstance(v, Mapping) and TARGET_KEY in v:
            yield where, target_path(v, where), str(v[TARGET_KEY])
        yield from _nested(v, where)


def outside_error(key: str, path: str, prefixes: Sequence[str]) -> D5PipeError:
    """The one line for a target outside the allow-list."""
    top = path.replace(":", ".").split(".", 1)[0]
    return D5PipeError(
        f"config error: key '{key}': {path!r} is outside the allow-list [{', '.join(prefixes)}] "
        f"(the person running d5pipe allows it: --allow {top}, {ENV_VAR}={top} or {user_allow_file()}); "
        "nothing was imported")


def check_target(value: Any, key: str, prefixes: Sequence[str] | None = None) -> list[str]:
    """Every target in ``value`` is importable-looking and allowed; their dotted paths.

    Nothing is imported (and no module is searched for).
    """
    allowed = allow_list() if prefixes is None else tuple(prefixes)
    paths = []
    for where, path, raw in _iter_raw(value, key):
        if not module_allowed(path, allowed):
            raise outside_error(where, raw, allowed)
        paths.append(path)
    return paths


def check_registry(custom: Any, key: str, builtins: Iterable[str],
                   prefixes: Sequence[str] | None = None) -> None:
    """A user registry ``{name: target}``: names are not built-ins, every target is allowed."""
    if custom is None:
        return
    if not isinstance(custom, Mapping):
        raise D5PipeError(f"config error: key '{key}': expected a mapping name -> target")
    reserved = set(builtins)
    for name, value in custom.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise D5PipeError(f"config error: key '{key}.{name}': a name is letters, digits, _ and - "
                              "(it appears in point IDs and file names)")
        if name in reserved:
            raise D5PipeError(f"config error: key '{key}.{name}': a custom entry may not reuse the "
                              f"built-in name {name!r}")
        check_target(value, f"{key}.{name}", prefixes)


def check_selector(name: Any, key: str, builtins: Iterable[str], custom: Mapping[str, Any] | None) -> None:
    """``name`` is a built-in or a key of the user registry."""
    known = [*builtins, *(custom or {})]
    if name not in known:
        raise D5PipeError(f"config error: key '{key}': unknown value {name!r} (known: {', '.join(known)}; "
                          "register your own under the section's custom mapping)")


def check_deprecated_prefixes(prefixes: Any, key: str) -> None:
    """``operators.allowed_prefixes`` no longer admits anything: it may only repeat what the real
    allow-list already allows."""
    names = [normalise_prefix(p, key) for p in prefixes or []]
    if all(module_allowed(n, ALWAYS_ALLOWED) for n in names):
        return  # the default ["d5pipe."]: no look at the allow file for every planned point
    allowed = allow_list()
    for p, name in zip(prefixes, names):
        if not module_allowed(name, allowed):
            raise D5PipeError(
                f"config error: key '{key}': {p!r} is not allowed by the person running d5pipe "
                f"[{', '.join(allowed)}]; a config cannot widen the allow-list (the key is deprecated: "
                f"remove it and run with --allow {name.split('.', 1)[0]})")
