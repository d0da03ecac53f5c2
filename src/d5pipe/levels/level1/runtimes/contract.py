"""What a level-1 runtime is: one :class:`Runtime` declaration in the module that implements it,
and the engine it builds (:class:`Engine`, :class:`Prepared`). Torch-free.

An engine (a built-in, or a user's target in ``level1.custom_runtimes`` under the allow-list of
the person running d5pipe) has a ``name`` and ``versions()`` (recorded with the point, as every
engine's: d5pipe.levels.declare.Engine) and ``prepare(model, example, threads, onnx_dir)``: it takes
the network (eval mode, its weights already in the point's dtype), an example batch and the
point's intra-op thread count; ``onnx_dir`` is where the network's ONNX export lives
(d5pipe.levels.level1.runtimes.onnx_runtimes). An engine that can run a network given as an ONNX file
(``level1.onnx_file``) is also a :class:`ReadsOnnx`.

``Prepared.run(x)`` returns the outputs of one batch as a tensor; ``Prepared.told`` says what the
runtime was told (thread counts, precision, graph optimisation) and ``Prepared.threads`` how many
intra-op threads it reports using (None: it cannot say -- flagged in the record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.declare import Builtin, missing_package
from d5pipe.levels.declare import Engine as BaseEngine

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class Prepared:
    """A network ready to run on a runtime (see the module docstring)."""

    run: Callable[[torch.Tensor], torch.Tensor]
    told: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    onnx: dict[str, str] = field(default_factory=dict)
    """``{"path", "sha256"}`` of the ONNX file the runtime read (empty for PyTorch)."""
    profile: Callable[[torch.Tensor, int, Path | None], dict[str, Any]] | None = None
    """The runtime's own profiler, where it has one: ``profile(x, iterations, trace)`` runs one warm
    and ``iterations`` profiled inferences of ``x`` in a session of its own (the timed one is left as
    it was) and returns the pass (d5pipe.measure.profile.pass_record; its trace written to ``trace``
    where the runtime writes one). None: torch.profiler profiles the call (one operator to it)."""


class Engine(BaseEngine, Protocol):
    """A level-1 runtime, built for one point."""

    def prepare(self, model: nn.Module, example: torch.Tensor, threads: int, onnx_dir: Path) -> Prepared: ...


@runtime_checkable
class ReadsOnnx(Engine, Protocol):
    """A runtime that also runs a network given as an ONNX file (``level1.onnx_file``)."""

    def prepare_file(self, onnx: dict[str, str], threads: int) -> Prepared:
        """An ONNX file (``{"path", "sha256"}``): a user's own, or d5pipe's export."""
        ...


@dataclass(frozen=True)
class Runtime(Builtin):
    """One built-in runtime of ``level1.runtime``, declared where it is implemented."""

    on_torch: bool = False
    """PyTorch itself: the point runs the model (forward+backward and peak memory are measured too)."""
    compiles: bool = False
    """The network runs under ``torch.compile`` (``level1.compile_mode``)."""
    impls: tuple[str, ...] = ("eager",)
    """The ``level1.impl`` values it takes."""
    reads_onnx: bool = False
    """It can run a network given as ``level1.onnx_file`` (its engine is a :class:`ReadsOnnx`)."""


def require(runtime: Builtin) -> None:
    """The point is skipped when a package ``runtime`` needs is not installed."""
    missing = missing_package(runtime.packages)
    if missing is not None:
        raise PointSkipped(f"level1.runtime={runtime.name}: the Python package {missing!r} is not installed "
                           "(pip install 'd5pipe[frameworks]'; make install does)")
