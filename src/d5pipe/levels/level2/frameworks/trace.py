"""A torch model traced once (``torch.export``, for one input shape: the point's batch) into a
:class:`~.graph.Graph`, and its weights exchanged with the frameworks as float64 numpy arrays by name.

``torch.export`` runs the model's Python once on fake tensors, so a library model whose forward
branches on shapes, dtypes or its config (transformers' ViT) traces as a plain network does; the
result is ATen operators, each translated by :data:`_ATEN` into a layer, with the parameters and
running statistics named as ``named_parameters`` / ``named_buffers`` name them. Values that depend
on neither the input, a weight nor a buffer (an attention mask built from ``arange``) are computed
here, once; an attention mask must come out all true or all zero (no mask), and a buffer is read by
a batch norm only. Shapes in the layers (reshape, expand, slice bounds) are the traced ones: a graph
is for the batch size it was traced with, which every framework compiles its step for anyway.
Dropout with p > 0 is refused: each framework would draw other masks, so the runs would not compute
the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from d5pipe.levels.level2.frameworks.contract import UnsupportedNetwork
from d5pipe.levels.level2.frameworks.graph import Graph, Layer

aten = torch.ops.aten


def _pair(v: Any) -> tuple[int, int]:
    v = [v] if isinstance(v, int) else list(v)
    return (int(v[0]), int(v[-1]))


class _Translation:
    """The layers of one exported program, built node by node."""

    def __init__(self, ep: Any) -> None:
        sig = ep.graph_signature
        self.params: dict[str, str] = dict(sig.inputs_to_parameters)
        self.buffers: dict[str, str] = dict(sig.inputs_to_buffers)
        self.consts: dict[fx.Node, Any] = {}
        self.lifted = {name: ep.constants[c] for name, c in sig.inputs_to_lifted_tensor_constants.items()}
        self.layers: list[Layer] = []
        self.value_params: set[str] = set()

    def shape(self, node: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in node.meta["val"].shape)

    def param(self, arg: Any, what: str) -> str:
        if not isinstance(arg, fx.Node) or arg.name not in self.params:
            raise UnsupportedNetwork(f"{what}: its weight is computed, not a parameter; not translated")
        return self.params[arg.name]

    def value(self, arg: Any, what: str) -> str:
        """A tensor input's name; a parameter used as a value gets a ``parameter`` layer first."""
        if not isinstance(arg, fx.Node):
            raise UnsupportedNetwork(f"{what}: {arg!r} as a tensor input is not translated")
        if arg.name in self.params:
            if arg.name not in self.value_params:
                self.value_params.add(arg.name)
                self.layers.append(Layer(arg.name, "parameter", (), {}, {"value": self.params[arg.name]}))
            return str(arg.name)
        if arg in self.consts or arg.name in self.buffers:
            raise UnsupportedNetwork(f"{what}: a constant tensor or buffer ({arg.name}) as an input is not translated")
        return str(arg.name)

    def const(self, arg: Any) -> Any:
        return fx.node.map_arg(arg, lambda n: self.consts[n])

    def is_const(self, node: fx.Node) -> bool:
        return all(n in self.consts for n in node.all_input_nodes)


def _args(node: fx.Node) -> Any:
    return node.args


def _arg(node: fx.Node, i: int, name: str, default: Any = None) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


Builder = Callable[[_Translation, fx.Node], Layer | None]


def _linear(t: _Translation, n: fx.Node) -> Layer:
    return Layer(n.name, "linear", (t.value(_args(n)[0], n.name),), {}, _affine(t, n, 1))


def _conv2d(t: _Translation, n: fx.Node) -> Layer:
    if len(t.shape(n)) != 4:
        raise UnsupportedNetwork(f"{n.name}: only 2-D convolutions are translated")
    attrs = {"stride": _pair(_arg(n, 3, "stride", 1)), "padding": _pair(_arg(n, 4, "padding", 0)),
             "dilation": _pair(_arg(n, 5, "dilation", 1)), "groups": int(_arg(n, 6, "groups", 1))}
    return Layer(n.name, "conv2d", (t.value(_args(n)[0], n.name),), attrs, _affine(t, n, 1))


def _affine(t: _Translation, n: fx.Node, w: int) -> dict[str, str]:
    """The parameters of a layer's weight (argument ``w``) and bias (``w + 1``), those it has."""
    roles = {"weight": _arg(n, w, "weight"), "bias": _arg(n, w + 1, "bias")}
    return {r: t.param(a, n.name) for r, a in roles.items() if a is not None}


def _batch_norm(t: _Translation, n: fx.Node) -> Layer:
    mean, var, training, momentum = (_arg(n, i, k) for i, k in
                                     ((3, "running_mean"), (4, "running_var"), (5, "training"), (6, "momentum")))
    if not (training and isinstance(momentum, float) and mean is not None and len(t.shape(n)) == 4):
        raise UnsupportedNetwork(f"{n.name}: only a BatchNorm2d training with a momentum and running statistics "
                                 "is translated")
    return Layer(n.name, "batch_norm", (t.value(_args(n)[0], n.name),), {"eps": float(_arg(n, 7, "eps")),
                 "momentum": momentum}, _affine(t, n, 1), {"mean": t.buffers[mean.name], "var": t.buffers[var.name]})


def _group_norm(t: _Translation, n: fx.Node) -> Layer:
    return Layer(n.name, "group_norm", (t.value(_args(n)[0], n.name),),
                 {"groups": int(_args(n)[1]), "eps": float(_arg(n, 4, "eps", 1e-5))}, _affine(t, n, 2))


def _layer_norm(t: _Translation, n: fx.Node) -> Layer:
    return Layer(n.name, "layer_norm", (t.value(_args(n)[0], n.name),),
                 {"dims": len(_args(n)[1]), "eps": float(_arg(n, 4, "eps", 1e-5))}, _affine(t, n, 2))


def _max_pool2d(t: _Translation, n: fx.Node) -> Layer:
    kernel = _pair(_args(n)[1])
    if _arg(n, 5, "ceil_mode", False) or _pair(_arg(n, 4, "dilation", 1)) != (1, 1):
        raise UnsupportedNetwork(f"{n.name}: max pooling with ceil_mode or dilation is not translated")
    return Layer(n.name, "max_pool2d", (t.value(_args(n)[0], n.name),), {
        "kernel": kernel, "stride": _pair(_arg(n, 2, "stride") or kernel), "padding": _pair(_arg(n, 3, "padding", 0))})


def _attention(t: _Translation, n: fx.Node) -> Layer:
    mask = _arg(n, 3, "attn_mask")
    if mask is not None and not (mask in t.consts and bool(
            t.consts[mask].all() if t.consts[mask].dtype == torch.bool else (t.consts[mask] == 0).all())):
        raise UnsupportedNetwork(f"{n.name}: attention with a mask is not translated")
    if _arg(n, 4, "dropout_p", 0.0) or _arg(n, 5, "is_causal", False) or _arg(n, 7, "enable_gqa", False):
        raise UnsupportedNetwork(f"{n.name}: attention with dropout, a causal mask or grouped queries is not translated")
    scale = _arg(n, 6, "scale")
    scale = 1 / math.sqrt(t.shape(_args(n)[0])[-1]) if scale is None else float(scale)
    return Layer(n.name, "attention", tuple(t.value(a, n.name) for a in _args(n)[:3]), {"scale": scale})


def _dropout(t: _Translation, n: fx.Node) -> Layer:
    if _arg(n, 1, "p") and _arg(n, 2, "train", True):
        raise UnsupportedNetwork(f"{n.name}: Dropout with p > 0 (each framework would draw other masks) is not translated")
    return Layer(n.name, "identity", (t.value(_args(n)[0], n.name),))


def _binary(kind: str) -> Builder:
    def build(t: _Translation, n: fx.Node) -> Layer:
        a, b = _args(n)[:2]
        if _arg(n, 2, "alpha", 1) != 1:
            raise UnsupportedNetwork(f"{n.name}: {kind} with alpha is not translated")
        if isinstance(b, (int, float)):
            return Layer(n.name, kind, (t.value(a, n.name),), {"other": float(b)})
        return Layer(n.name, kind, (t.value(a, n.name), t.value(b, n.name)))

    return build


def _matmul(t: _Translation, n: fx.Node) -> Layer:
    if min(len(t.shape(a)) for a in _args(n)[:2]) < 2:
        raise UnsupportedNetwork(f"{n.name}: matmul of a vector is not translated")
    return Layer(n.name, "matmul", (t.value(_args(n)[0], n.name), t.value(_args(n)[1], n.name)))


def _unary(kind: str, attrs: Callable[[_Translation, fx.Node], dict[str, Any]] = lambda t, n: {}) -> Builder:
    return lambda t, n: Layer(n.name, kind, (t.value(_args(n)[0], n.name),), attrs(t, n))


def _dim(t: _Translation, n: fx.Node, d: Any) -> int:
    return int(d) % len(t.shape(_args(n)[0]))


def _slice(t: _Translation, n: fx.Node) -> dict[str, Any]:
    dim = _dim(t, n, _arg(n, 1, "dim", 0))
    start, stop, step = slice(_arg(n, 2, "start"), _arg(n, 3, "end"), _arg(n, 4, "step", 1)).indices(
        t.shape(_args(n)[0])[dim])
    return {"dim": dim, "start": start, "stop": stop, "step": step}


def _mean(t: _Translation, n: fx.Node) -> dict[str, Any]:
    dims = _arg(n, 1, "dim")
    return {"dims": tuple(range(len(t.shape(_args(n)[0])))) if dims is None else tuple(int(d) for d in dims),
            "keepdim": bool(_arg(n, 2, "keepdim", False))}


def _adaptive_avg_pool2d(t: _Translation, n: fx.Node) -> Layer:
    if tuple(t.shape(n)[2:]) != (1, 1):
        raise UnsupportedNetwork(f"{n.name}: adaptive average pooling to other than 1x1 is not translated")
    return Layer(n.name, "mean", (t.value(_args(n)[0], n.name),), {"dims": (2, 3), "keepdim": True})


def _in_place(build: Builder) -> Builder:
    """An in-place operator as its out-of-place layer, when nothing reads the value it overwrote
    afterwards (``x += residual`` rebinds ``x`` to the result); a batch norm's count of batches,
    which no framework keeps, is skipped."""
    def translate(t: _Translation, n: fx.Node) -> Layer | None:
        target = _args(n)[0]
        if isinstance(target, fx.Node) and t.buffers.get(target.name, "").endswith("num_batches_tracked"):
            return None
        order = {node: i for i, node in enumerate(n.graph.nodes)}
        if not isinstance(target, fx.Node) or target.name in t.buffers or target.name in t.params or any(
                order[u] > order[n] for u in target.users):
            raise UnsupportedNetwork(f"{n.name}: an in-place {n.target} of a value read afterwards is not translated")
        return build(t, n)

    return translate


def _out_shape(t: _Translation, n: fx.Node) -> dict[str, Any]:
    return {"shape": t.shape(n)}


_ATEN: dict[Any, Builder] = {
    aten.linear.default: _linear, aten.conv2d.default: _conv2d, aten.batch_norm.default: _batch_norm,
    aten.group_norm.default: _group_norm, aten.layer_norm.default: _layer_norm, aten.max_pool2d.default: _max_pool2d,
    aten.scaled_dot_product_attention.default: _attention, aten.dropout.default: _dropout,
    aten.adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
    aten.relu.default: _unary("relu"), aten.relu_.default: _in_place(_unary("relu")),
    aten.gelu.default: _unary("gelu", lambda t, n: {"approximate": str(_arg(n, 1, "approximate", "none"))}),
    aten.softmax.int: _unary("softmax", lambda t, n: {"dim": _dim(t, n, _args(n)[1])}),
    aten._softmax.default: _unary("softmax", lambda t, n: {"dim": _dim(t, n, _args(n)[1])}),
    aten.mean.dim: _unary("mean", _mean), aten.mean.default: _unary("mean", _mean),
    aten.flatten.using_ints: _unary("flatten", lambda t, n: {"start": int(_arg(n, 1, "start_dim", 0)),
                                                             "end": int(_arg(n, 2, "end_dim", -1))}),
    aten.view.default: _unary("reshape", _out_shape), aten.reshape.default: _unary("reshape", _out_shape),
    aten._unsafe_view.default: _unary("reshape", _out_shape),
    aten.expand.default: _unary("expand", _out_shape),
    aten.transpose.int: _unary("permute", lambda t, n: {"perm": _swap(len(t.shape(n)), _dim(t, n, _args(n)[1]),
                                                                       _dim(t, n, _args(n)[2]))}),
    aten.t.default: _unary("permute", lambda t, n: {"perm": tuple(reversed(range(len(t.shape(n)))))}),
    aten.permute.default: _unary("permute", lambda t, n: {"perm": tuple(_dim(t, n, d) for d in _args(n)[1])}),
    aten.select.int: _unary("select", lambda t, n: {"dim": _dim(t, n, _args(n)[1]),
                                                    "index": int(_args(n)[2]) % t.shape(_args(n)[0])[_dim(t, n, _args(n)[1])]}),
    aten.slice.Tensor: _unary("slice", _slice),
    aten.clone.default: _unary("identity"), aten.contiguous.default: _unary("identity"),
    aten.alias.default: _unary("identity"),
    aten.add.Tensor: _binary("add"), aten.sub.Tensor: _binary("sub"), aten.mul.Tensor: _binary("mul"),
    aten.div.Tensor: _binary("div"), aten.add_.Tensor: _in_place(_binary("add")),
    aten.matmul.default: _matmul,
    aten.cat.default: lambda t, n: Layer(n.name, "cat", tuple(t.value(a, n.name) for a in _args(n)[0]),
                                         {"dim": int(_arg(n, 1, "dim", 0)) % len(t.shape(n))}),
}
"""ATen operator -> its layer (None: nothing to compute; :class:`UnsupportedNetwork` for what is not translated)."""


def _swap(ndim: int, a: int, b: int) -> tuple[int, ...]:
    perm = list(range(ndim))
    perm[a], perm[b] = b, a
    return tuple(perm)


def trace(model: nn.Module, example: tuple[int, ...]) -> Graph:
    """The model's layers in execution order for a float batch shaped ``example`` (the batch size
    included), traced in training mode (:class:`UnsupportedNetwork` for anything not translated)."""
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    was = model.training
    model.train()
    try:
        ep = torch.export.export(model, (torch.zeros(example, dtype=dtype),), strict=False)
    except Exception as exc:  # noqa: BLE001 - any trace failure means: not translatable
        raise UnsupportedNetwork(f"the model cannot be traced (torch.export): {exc}".splitlines()[0]) from exc
    finally:
        model.train(was)
    t = _Translation(ep)
    sig = ep.graph_signature
    if len(sig.user_inputs) != 1 or len(sig.user_outputs) != 1:
        raise UnsupportedNetwork("only a model of one tensor input and one output is translated")
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in t.lifted:
            t.consts[node] = t.lifted[node.name]
        elif node.op == "call_function" and t.is_const(node):
            t.consts[node] = node.target(*t.const(node.args), **t.const(node.kwargs))  # computed once, here
        elif node.op == "call_function":
            if node.target not in _ATEN:
                raise UnsupportedNetwork(f"{node.target} ({node.name}) is not translated to other frameworks")
            layer = _ATEN[node.target](t, node)
            if layer is not None:
                t.layers.append(layer)
        elif node.op not in ("placeholder", "output"):
            raise UnsupportedNetwork(f"{node.op} {node.target} ({node.name}) is not translated to other frameworks")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    used = {p for layer in t.layers for p in layer.params.values()}
    if used != set(shapes):
        raise UnsupportedNetwork(f"parameters outside translated layers: {sorted(set(shapes) - used)}")
    buffers = dict(model.named_buffers())
    buffer_shapes = {b: tuple(buffers[b].shape) for layer in t.layers for b in layer.buffers.values()}
    return Graph(sig.user_inputs[0], str(sig.user_outputs[0]), tuple(t.layers), shapes, buffer_shapes)


def model_tensors(model: nn.Module, graph: Graph) -> dict[str, torch.Tensor]:
    """The model's parameters and running statistics under the graph's names."""
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {n: tensors[n] for n in [*graph.shapes, *graph.buffer_shapes]}


def as_float64(tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Float64 numpy copies of ``tensors``: weights as the frameworks exchange them."""
    return {n: t.detach().double().cpu().numpy().copy() for n, t in tensors.items()}


def load_weights(tensors: dict[str, torch.Tensor], weights: dict[str, Any]) -> None:
    """Copy ``weights`` (numpy arrays by name) into ``tensors``, in each tensor's dtype."""
    with torch.no_grad():
        for name, t in tensors.items():
            t.copy_(torch.from_numpy(np.asarray(weights[name])))


def initial_weights(model: nn.Module, graph: Graph) -> dict[str, Any]:
    """The model's parameters and running statistics as float64 numpy arrays, by name: what every
    framework of a point starts from."""
    return as_float64(model_tensors(model, graph))
