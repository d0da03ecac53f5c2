"""What a level-0 framework is: one :class:`Framework` declaration in the module that implements it,
and the contract its engine fills (:class:`Engine`, :class:`Prepared`). Torch-free.

A declaration says everything the layers above need without importing the framework: its name,
the packages a point needs (``d5pipe plan`` checks them), its capabilities (whether it
differentiates, its dtypes, its built-in operators, how a call is made to block until done) and
its factory, which imports the framework only when a point runs. The schema's choices, the plan's
checks and the docs' table are derived from the declarations (d5pipe.levels.level0.frameworks).

Arrays cross the boundary as float64 NumPy arrays in PyTorch's layout: the engine converts them to
its own arrays, dtype and layout once, outside the timed call, and converts its outputs and
gradients back for the checks (d5pipe.levels.verify).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from d5pipe.levels.declare import Compiles
from d5pipe.levels.declare import Engine as BaseEngine

Layout = tuple[int, ...] | None
"""Axes of an array in the framework's layout, read from PyTorch's (``np.transpose``); None: the same."""

OPERATORS = ("matmul", "bmm", "conv2d", "sdpa", "layer_norm", "softmax", "gelu", "sum")
"""Level 0's built-in operators (the schema's list): what a framework has unless it declares fewer."""


@dataclass(frozen=True)
class NativeOp:
    """An operator written in one framework: a function of that framework's arrays (ONNX Runtime:
    ``fn(dtype, shapes)`` returns the ``onnx.ModelProto`` of the operator), and the layout it takes
    each input in and gives its output in."""

    fn: Callable[..., Any]
    inputs: tuple[Layout, ...] = ()
    """One layout per input (empty: every input in PyTorch's layout)."""
    output: Layout = None
    form: str = ""
    """How it is written (recorded), e.g. ``lax.conv_general_dilated NHWC/HWIO``."""


class Prepared(Compiles, Protocol):
    """One operator on one set of inputs, converted and ready to call; its ``compile_s`` is the
    first call's (a jit compilation, a session build), kept out of the timing; 0: none."""

    def call(self) -> None:
        """One call, returning only when its result is computed (the timed callable)."""

    def output(self) -> np.ndarray:
        """One call's output as float64 in PyTorch's layout."""

    def gradients(self, upstream: np.ndarray) -> list[np.ndarray | None]:
        """The gradient of every input for ``upstream`` (float64, PyTorch's layout; None where an
        input got none). Only called when :attr:`Framework.differentiates`."""


class Engine(BaseEngine):
    """A framework, imported and set up for one process (threads). What the engines share is here:
    ``name`` is also the package whose version is recorded (``versions()``), :attr:`ops` its built-ins."""

    told: dict[str, Any]
    """What the framework was told (threads, modes): recorded with every point."""
    ops: dict[str, NativeOp]
    """The framework's own form of each built-in operator it has."""

    def session(self, dtype: str) -> AbstractContextManager[Any]:
        """Around a whole point: the process-wide switches ``dtype`` needs (JAX's x64 mode), all
        restored on exit; none unless an engine says."""
        return nullcontext()

    def builtin(self, name: str) -> NativeOp | None:
        """The framework's own form of built-in operator ``name``; None: it has none."""
        return self.ops.get(name)

    def prepare(self, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> Prepared:
        """``op`` on ``inputs`` (float64, PyTorch's layout) in ``dtype``, the arrays made once here."""
        raise NotImplementedError


@dataclass(frozen=True)
class Framework:
    """One framework of ``operators.framework``, declared where it is implemented."""

    name: str
    title: str
    packages: tuple[str, ...]
    """Python packages a point on it needs (``d5pipe plan`` names the first one missing)."""
    differentiates: bool
    """Whether the gradient check runs (:attr:`gradient` says how)."""
    dtypes: tuple[str, ...]
    """The dtypes it computes in; a point in another is skipped with the reason."""
    sync: str
    """How each timed call is made to block until its result is computed (recorded)."""
    gradient: str = ""
    """How gradients are taken (``jax.vjp``); empty: forward only."""
    builtins: tuple[str, ...] = OPERATORS
    """The built-in operators it has; a point of another is skipped with the reason."""
    engine: Callable[[int], Engine] | None = None
    """``engine(threads)``, importing the framework; None: level 0's own PyTorch path
    (d5pipe.levels.level0.point: layouts, ``torch.compile``, CUDA, backward timings)."""
    impls: tuple[str, ...] = ("eager",)
    """The ``operators.impl`` values it takes."""
    layouts: tuple[str, ...] = ("contiguous",)
    """The ``operators.layout`` values it takes (its own layout is its business: :class:`NativeOp`)."""
    devices: tuple[str, ...] = ("cpu",)
    """The device kinds it runs on."""
    notes: tuple[str, ...] = field(default=())
    """What a reader of its results should know (the docs' table shows them)."""


def to_layout(array: np.ndarray, layout: Layout) -> np.ndarray:
    """``array`` (PyTorch's layout) in ``layout``, contiguous."""
    return np.ascontiguousarray(array if layout is None else np.transpose(array, layout))


def from_layout(array: np.ndarray, layout: Layout) -> np.ndarray:
    """``array`` in ``layout`` back in PyTorch's layout, as float64."""
    out = np.asarray(array).astype(np.float64)
    return out if layout is None else np.transpose(out, np.argsort(layout))


def input_layouts(op: NativeOp, n: int) -> tuple[Layout, ...]:
    """One layout per input of ``op`` for ``n`` inputs."""
    return op.inputs if op.inputs else (None,) * n
