"""A network as framework-neutral layers, so that every framework builds the same network natively
(after Deep500's per-framework network visitors); a torch model becomes one in
d5pipe.levels.level2.frameworks.trace. Torch-free.

A :class:`Graph` is a list of :class:`Layer` s in execution order: each names its output, its
inputs, what it computes (``kind``), its settings and the model parameters it uses (by their
``named_parameters`` names, which are the names of the weights every framework is handed).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from d5pipe.levels.level2.frameworks.contract import UnsupportedNetwork


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    """role (``weight``, ``bias``) -> parameter name."""
    buffers: dict[str, str] = field(default_factory=dict)
    """role (``mean``, ``var``: a batch norm's running statistics) -> buffer name."""


@dataclass(frozen=True)
class Graph:
    input: str
    output: str
    layers: tuple[Layer, ...]
    shapes: dict[str, tuple[int, ...]]
    """Parameter name -> shape, in ``named_parameters`` order."""
    buffer_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Running-statistics buffer name -> shape: a framework keeps them as torch does in training
    (momentum average of the batch mean and unbiased variance), and hands them back with the weights."""

    def kinds(self) -> list[str]:
        return sorted({layer.kind for layer in self.layers})

    def hwio(self, weights: dict[str, Any], back: bool = False) -> dict[str, Any]:
        """``weights`` (numpy) with the convolutions' torch OIHW as HWIO, the layout of a channels-last
        framework's convolutions (``back``: HWIO as OIHW); the others as they are."""
        convs = {layer.params["weight"] for layer in self.layers if layer.kind == "conv2d"}
        perm = (3, 2, 0, 1) if back else (2, 3, 1, 0)
        return {n: np.ascontiguousarray(np.transpose(w, perm)) if n in convs else w for n, w in weights.items()}


def interpret(graph: Graph, ops: dict[str, Any], params: dict[str, Any], x: Any,
              keep_stats: Any) -> Any:
    """The graph's output for ``x``: each layer by ``ops[kind](layer, its params, *inputs)``; for a
    batch norm, ``keep_stats(layer, ops["batch_stats"](...))`` gets its batch's mean and unbiased
    variance (the framework keeps its running statistics with :func:`running_update`); ``ops["input"]``,
    if given, takes the batch first (:func:`channels_last`)."""
    env = {graph.input: ops["input"](x) if "input" in ops else x}
    for layer in graph.layers:
        p = {role: params[name] for role, name in layer.params.items()}
        args = [env[i] for i in layer.inputs]
        env[layer.name] = ops[layer.kind](layer, p, *args)
        if layer.buffers:
            keep_stats(layer, ops["batch_stats"](layer, p, *args))
    return env[graph.output]


def check_ops(graph: Graph, ops: dict[str, Any], who: str) -> None:
    """:class:`UnsupportedNetwork` naming the layers ``who`` has no builder for."""
    missing = sorted({layer.kind for layer in graph.layers if layer.kind not in ops})
    if missing:
        raise UnsupportedNetwork(f"{who}: no builder for {missing}")


TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
CHANNELS_LAST = ("conv2d", "batch_norm", "batch_stats", "max_pool2d")
"""Kinds a channels-last framework writes for NHWC values itself (see :func:`channels_last`)."""


def channels_last(ops: dict[str, Any], transpose: Any) -> dict[str, Any]:
    """``ops`` for a network whose 4-D values are held channels-last (NHWC, the layout TensorFlow's
    and XLA's CPU convolutions take; ``input`` transposes a 4-D batch, inside the step): the kinds
    of :data:`CHANNELS_LAST` are written for NHWC by the framework, ``relu``, ``identity`` and
    ``add`` (of equal ranks) take any layout, ``mean`` reduces the NHWC axes of torch's dims; any
    other kind sees its 4-D inputs channels-first as torch lays them out (``transpose(x, perm)``),
    and its 4-D output goes back to NHWC."""
    def torch_layout(op: Any) -> Any:
        def run(layer: Layer, p: dict[str, Any], *xs: Any) -> Any:
            out = op(layer, p, *(transpose(x, TO_NCHW) if x.ndim == 4 else x for x in xs))
            return transpose(out, TO_NHWC) if out.ndim == 4 else out

        return run

    def mean(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        dims = {d % x.ndim for d in layer.attrs["dims"]}
        if x.ndim != 4 or not (layer.attrs["keepdim"] or 1 in dims or {2, 3} <= dims):  # kept axes in torch's order
            return torch_layout(ops["mean"])(layer, p, x)
        return ops["mean"](replace(layer, attrs={**layer.attrs, "dims": tuple(sorted(TO_NHWC.index(d) for d in dims))}),
                           p, x)

    def add(layer: Layer, p: dict[str, Any], a: Any, b: Any) -> Any:
        return a + b if a.ndim == b.ndim else torch_layout(ops["add"])(layer, p, a, b)

    native = (*CHANNELS_LAST, "relu", "identity")
    return {k: op if k in native else torch_layout(op) for k, op in ops.items()} | {
        "mean": mean, "add": add, "input": lambda x: transpose(x, TO_NHWC) if x.ndim == 4 else x}


def running_update(old: Any, batch: Any, momentum: float) -> Any:
    """torch's running average: ``(1 - momentum) * old + momentum * batch``."""
    return (1 - momentum) * old + momentum * batch
