"""A network as framework-neutral layers, so that every framework builds the same network natively
(after Deep500's per-framework network visitors); a torch model becomes one in
d5pipe.levels.level2.frameworks.trace. Torch-free.

A :class:`Graph` is a list of :class:`Layer` s in execution order: each names its output, its
inputs, what it computes (``kind``), its settings and the model parameters it uses (by their
``named_parameters`` names, which are the names of the weights every framework is handed).
:data:`KINDS` is the vocabulary: what every framework builds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from d5pipe.levels.level2.frameworks.contract import UnsupportedNetwork

KINDS: dict[str, str] = {
    "linear": "x @ weight.T + bias over the last axis (torch.nn.Linear)",
    "conv2d": "2-D convolution: stride, padding, dilation, groups (weight OIHW; HWIO in a channels-last build)",
    "batch_norm": "BatchNorm2d in training: batch statistics; eps, momentum; running mean and unbiased variance kept",
    "group_norm": "GroupNorm: groups, eps", "layer_norm": "LayerNorm over the last `dims` axes: eps",
    "max_pool2d": "max pooling: kernel, stride, padding (padded with -inf)",
    "relu": "max(x, 0)", "gelu": "GELU: approximate 'none' (the exact erf form) or 'tanh'",
    "softmax": "softmax along dim", "mean": "mean over dims, keepdim",
    "attention": "softmax(q @ k^T * scale) @ v (scaled_dot_product_attention without a mask, dropout or causality)",
    "matmul": "torch.matmul of two values of rank >= 2 (batched, broadcasting)",
    "add": "a + b (broadcasting), or a + the scalar `other`", "sub": "a - b, or a - `other`",
    "mul": "a * b, or a * `other` (an attention scale)", "div": "a / b, or a / `other`",
    "flatten": "axes start..end into one", "reshape": "to `shape` (as traced)", "permute": "axes in the order `perm`",
    "expand": "broadcast to `shape` (as traced)", "cat": "the inputs along dim",
    "select": "`index` along dim, which is dropped", "slice": "start:stop:step along dim",
    "identity": "x (dropout at p = 0, clone)",
    "parameter": "the parameter `value` as a value (a class token, position embeddings)",
}
"""Every layer kind, as torch computes it and with its settings (``attrs``): what each framework
builds (d5pipe.levels.level2.frameworks.trace translates torch's operators into them)."""


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


def common_ops() -> dict[str, Callable[..., Any]]:
    """The kinds every framework builds alike, with Python's own operators and indexing: the binary
    arithmetic (on two values, or on one and the scalar ``other``), ``identity``, ``parameter``,
    ``select`` and ``slice``."""
    def along(layer: Layer, x: Any, index: Any) -> Any:
        return x[(slice(None),) * layer.attrs["dim"] + (index,)]

    def binary(op: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        return lambda layer, p, a, b=None: op(a, layer.attrs["other"] if b is None else b)

    return {
        "add": binary(operator.add), "sub": binary(operator.sub), "mul": binary(operator.mul),
        "div": binary(operator.truediv),
        "identity": lambda layer, p, x: x,
        "parameter": lambda layer, p: p["value"],
        "select": lambda layer, p, x: along(layer, x, layer.attrs["index"]),
        "slice": lambda layer, p, x: along(layer, x, slice(layer.attrs["start"], layer.attrs["stop"], layer.attrs["step"])),
    }


def check_ops(graph: Graph, ops: dict[str, Any], who: str) -> None:
    """:class:`UnsupportedNetwork` naming the layers ``who`` has no builder for."""
    missing = sorted({layer.kind for layer in graph.layers if layer.kind not in ops})
    if missing:
        raise UnsupportedNetwork(f"{who}: no builder for {missing}")


TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
CHANNELS_LAST = ("conv2d", "batch_norm", "batch_stats", "max_pool2d")
"""Kinds a channels-last framework writes for NHWC values itself (see :func:`channels_last`)."""
ELEMENTWISE = ("relu", "gelu", "identity", "add", "sub", "mul", "div")
"""Kinds that compute the same in any layout (a binary one when both its inputs are in the same one)."""


def held_channels_last(graph: Graph) -> set[str]:
    """The values a channels-last build holds NHWC: the input when a :data:`CHANNELS_LAST` kind
    takes it, their outputs, and what :data:`ELEMENTWISE` kinds and a ``mean`` keeping its dims
    compute from NHWC values alone (a scalar operand is no value). Every other value is held as
    torch lays it out -- a transformer's 4-D attention heads are no images."""
    held: set[str] = set()
    if any(graph.input in layer.inputs for layer in graph.layers if layer.kind in CHANNELS_LAST):
        held.add(graph.input)
    for layer in graph.layers:
        if layer.kind in CHANNELS_LAST or (
                layer.inputs and all(i in held for i in layer.inputs)
                and (layer.kind in ELEMENTWISE or (layer.kind == "mean" and layer.attrs["keepdim"]))):
            held.add(layer.name)
    return held


def channels_last(graph: Graph, ops: dict[str, Any], transpose: Any) -> dict[str, Any]:
    """``ops`` for a network whose image values are held channels-last (NHWC, the layout TensorFlow's
    and XLA's CPU convolutions take; :func:`held_channels_last` says which; ``input`` transposes
    the batch, inside the step, when it is one): the kinds of :data:`CHANNELS_LAST` are written for
    NHWC by the framework, :data:`ELEMENTWISE` ones take their inputs as they are held, ``mean``
    reduces the NHWC axes of torch's dims where the kept axes stay in torch's order; any other kind
    sees its inputs as torch lays them out (an NHWC value transposed, ``transpose(x, perm)``), and
    its output is held so."""
    held = held_channels_last(graph)

    def laid(x: Any, name: str, nhwc: bool) -> Any:
        if len(x.shape) != 4 or (name in held) == nhwc:
            return x
        return transpose(x, TO_NHWC if nhwc else TO_NCHW)

    def wrap(kind: str, op: Any) -> Any:
        def run(layer: Layer, p: dict[str, Any], *xs: Any) -> Any:
            if kind == "mean" and layer.inputs[0] in held:
                dims = {d % 4 for d in layer.attrs["dims"]}
                if layer.attrs["keepdim"] or 1 in dims or {2, 3} <= dims:  # the kept axes in torch's order
                    nhwc_dims = tuple(sorted(TO_NHWC.index(d) for d in dims))
                    return op(replace(layer, attrs={**layer.attrs, "dims": nhwc_dims}), p, *xs)
            nhwc = kind in CHANNELS_LAST or layer.name in held
            return op(layer, p, *(laid(x, n, nhwc) for x, n in zip(xs, layer.inputs)))

        return run

    return {k: wrap(k, op) for k, op in ops.items()} | {
        "input": lambda x: transpose(x, TO_NHWC) if graph.input in held and len(x.shape) == 4 else x}


def native_ops(graph: Graph, own: dict[str, Any], who: str, transpose: Any) -> dict[str, Any]:
    """A channels-last framework's builders for ``graph``: its ``own`` kinds joined to
    :func:`common_ops`, checked (:func:`check_ops`) and laid out by :func:`channels_last`."""
    ops = common_ops() | own
    check_ops(graph, ops, who)
    return channels_last(graph, ops, transpose)


def running_update(old: Any, batch: Any, momentum: float) -> Any:
    """torch's running average: ``(1 - momentum) * old + momentum * batch``."""
    return (1 - momentum) * old + momentum * batch
