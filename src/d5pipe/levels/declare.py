"""One declaration per built-in, and the contract every engine fills. Torch-free.

A built-in (a model, an optimizer, a level-1 runtime, a level-2 framework ...) is declared once,
in the package that implements it, by one :class:`Builtin`: its name, its factory (a dotted path,
so that nothing is imported until a point runs; an implementing module writes
``f"{__name__}.make"`` and spells no path), the section keys its factory takes and the packages it
needs. d5pipe.levels.targets turns a declaration into the same kind of target a user's plug-in is,
and both are built by one call (d5pipe.levels.instantiate.build); the schema's choices and
``d5pipe plan``'s availability checks are read from the declarations.

An **engine** runs a network or an operator on some framework (a level-1 runtime, a level-2
training framework): :class:`Engine` is what every one of them has; what only some can do is a
declared Protocol of its own (:class:`Compiles`), tested with ``isinstance``, never probed.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from d5pipe.core.allowlist import TARGET_KEY


def installed(package: str) -> bool:
    """Whether ``package`` could be imported (nothing is imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def missing_package(packages: Iterable[str], is_installed: Callable[[str], bool] = installed) -> str | None:
    """The first of ``packages`` that is not installed here, or None."""
    return next((p for p in packages if not is_installed(p)), None)


def package_versions(*packages: str) -> dict[str, str]:
    """``{package: its __version__}``: what a built-in engine records as its ``versions()``."""
    return {p: str(importlib.import_module(p).__version__) for p in packages}


@dataclass(frozen=True)
class Builtin:
    """One built-in of a plug-in slot (d5pipe.levels.targets.SLOTS), declared where it is implemented."""

    name: str
    """The selector's value that picks it."""
    factory: str
    """Dotted path of the callable that builds it (called as a user's target is)."""
    packages: tuple[str, ...] = ()
    """Python packages a point on it needs beyond torch (``d5pipe plan`` names the first one missing)."""
    args: tuple[str, ...] = ()
    """Keys of the slot's config section passed to the factory by the same name."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Constant arguments of the factory."""

    def target(self, section: Mapping[str, Any]) -> dict[str, Any]:
        """The registered target, with its arguments from ``section`` (filled with its schema defaults)."""
        return {TARGET_KEY: self.factory, **self.fixed, **{k: section[k] for k in self.args if k in section}}


B = TypeVar("B", bound=Builtin)


def declared(*builtins: B) -> dict[str, B]:
    """Name -> declaration, in the given order (the first is the default); a name declared twice is a bug."""
    out = {b.name: b for b in builtins}
    if len(out) != len(builtins):
        raise ValueError(f"a built-in is declared twice: {[b.name for b in builtins]}")
    return out


class Engine(Protocol):
    """What runs a network on some framework (a level-1 runtime, a level-2 training framework)."""

    name: str

    def versions(self) -> dict[str, str]:
        """The packages that compute, with their versions (recorded with every point); a built-in
        engine that subclasses this one records by default the package it is named after."""
        return package_versions(self.name)


@runtime_checkable
class Profiles(Protocol):
    """An engine with a profiler of its own (its operators are invisible to torch.profiler):
    ``profile_steps(step, iterations, trace)`` calls ``step`` once unprofiled, then ``iterations``
    times under that profiler, and returns the pass (d5pipe.measure.profile.pass_record), its trace
    written to ``trace`` where the profiler gives one."""

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]: ...


@runtime_checkable
class Compiles(Protocol):
    """An engine that measures its own compile or trace time in its ``prepare`` (kept out of every
    step); one that does not has the whole ``prepare`` timed as its compile."""

    compile_s: float
