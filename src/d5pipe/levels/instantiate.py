"""Building targets where they run: the allow-list check, then Hydra's ``instantiate``.

:func:`build` is the one way d5pipe turns a target (d5pipe.levels.targets) into an object, for
built-ins and user code alike::

    build({"_target_": "mypkg.models.MyNet", "width": 64}, "model.custom.mynet",
          input_shape=(1, 8, 8), n_classes=10)

Every ``_target_`` in the mapping, nested ones included, is checked against the invoking user's
allow-list (d5pipe.core.allowlist) **before anything is imported**; then
``hydra.utils.instantiate(target, _partial_=True, _convert_="all")`` imports and builds the nested
targets and returns a partial of the top one, which is called with d5pipe's own arguments
(``input_shape``, ``params``, ``optimizer`` ...) unconverted, so tensors, generators and modules
pass through as they are. Errors while importing or building are one :class:`D5PipeError` line
naming the key; errors raised by the user's code itself propagate unchanged (the point fails
with their text, or is skipped for :class:`~d5pipe.levels.contract.PointSkipped`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from d5pipe.core.allowlist import TARGET_KEY, check_target
from d5pipe.core.errors import D5PipeError, exception_chain


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def accepted(factory: Any, offered: Mapping[str, Any]) -> dict[str, Any]:
    """The items of ``offered`` that ``factory`` takes by keyword (all of them if it takes
    ``**kwargs`` or has no readable signature)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return dict(offered)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(offered)
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                   inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in offered.items() if k in names}


def build(target: Mapping[str, Any], key: str, *args: Any, offered: Mapping[str, Any] | None = None,
          **kwargs: Any) -> Any:
    """Check, import and call ``target`` with ``args``/``kwargs`` (see the module docstring), and
    with those of ``offered`` its factory takes (a library class that knows nothing of d5pipe's
    ``input_shape`` is built without it; the config can map such values by interpolation)."""
    check_target(target, key)
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    config = {k: v for k, v in target.items() if k != "_partial_"}
    try:
        factory = instantiate(config, _partial_=True, _convert_="all")
    except InstantiationException as exc:
        cause = exception_chain(exc)[-1]  # the root cause
        if isinstance(cause, D5PipeError):
            raise cause from None
        raise D5PipeError(f"{key}: cannot build target {target.get(TARGET_KEY)!r} ({_one_line(cause)})") from exc
    if offered:
        kwargs = {**accepted(factory, offered), **kwargs}
    return factory(*args, **kwargs)


def locate(path: str, key: str) -> Any:
    """The object ``path`` (dotted) names, after the allow-list check; imports only its modules."""
    check_target(path, key)
    parts = path.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):  # the longest prefix that is a module
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                raise D5PipeError(f"{key}: importing {name!r} failed ({_one_line(exc)})") from exc
            continue
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
            raise D5PipeError(f"{key}: importing {name!r} failed ({_one_line(exc)})") from exc
        for attr in parts[i:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                where = obj.__name__ if isinstance(obj, ModuleType) else type(obj).__name__
                raise D5PipeError(f"{key}: {where!r} has no attribute {attr!r} (target {path!r})") from None
        return obj
    raise D5PipeError(f"{key}: cannot import module {parts[0]!r} (target {path!r}; is it on PYTHONPATH?)")
