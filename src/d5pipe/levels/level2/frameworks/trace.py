"""A torch model traced once (torch.fx) into a :class:`~.graph.Graph`, and its weights exchanged
with the frameworks as float64 numpy arrays by name. Dropout with p > 0 is refused: each framework
would draw other masks, so the runs would not compute the same thing."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from d5pipe.levels.level2.frameworks.contract import UnsupportedNetwork
from d5pipe.levels.level2.frameworks.graph import Graph, Layer


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _module_layer(name: str, prefix: str, mod: nn.Module, inputs: tuple[str, ...]) -> Layer:
    def params(*roles: str) -> dict[str, str]:
        return {r: f"{prefix}.{r}" for r in roles if getattr(mod, r, None) is not None}

    if isinstance(mod, nn.Linear):
        return Layer(name, "linear", inputs, {}, params("weight", "bias"))
    if isinstance(mod, nn.Conv2d):
        if mod.padding_mode != "zeros" or isinstance(mod.padding, str):
            raise UnsupportedNetwork(f"{prefix}: Conv2d padding {mod.padding!r}/{mod.padding_mode} is not translated")
        attrs = {"stride": _pair(mod.stride), "padding": _pair(mod.padding), "dilation": _pair(mod.dilation),
                 "groups": mod.groups}
        return Layer(name, "conv2d", inputs, attrs, params("weight", "bias"))
    if isinstance(mod, nn.BatchNorm2d):
        if mod.momentum is None or not mod.track_running_stats:
            raise UnsupportedNetwork(f"{prefix}: BatchNorm2d without a momentum or running statistics is not translated")
        return Layer(name, "batch_norm", inputs, {"eps": mod.eps, "momentum": mod.momentum}, params("weight", "bias"),
                     {"mean": f"{prefix}.running_mean", "var": f"{prefix}.running_var"})
    if isinstance(mod, nn.GroupNorm):
        return Layer(name, "group_norm", inputs, {"groups": mod.num_groups, "eps": mod.eps}, params("weight", "bias"))
    if isinstance(mod, nn.LayerNorm):
        return Layer(name, "layer_norm", inputs, {"dims": len(mod.normalized_shape), "eps": mod.eps},
                     params("weight", "bias"))
    if isinstance(mod, nn.MaxPool2d):
        if mod.ceil_mode or _pair(mod.dilation) != (1, 1):
            raise UnsupportedNetwork(f"{prefix}: MaxPool2d with ceil_mode or dilation is not translated")
        return Layer(name, "max_pool2d", inputs, {"kernel": _pair(mod.kernel_size),
                                                  "stride": _pair(mod.stride or mod.kernel_size),
                                                  "padding": _pair(mod.padding)})
    if isinstance(mod, nn.ReLU):
        return Layer(name, "relu", inputs)
    if isinstance(mod, nn.Flatten):
        return Layer(name, "flatten", inputs, {"start": mod.start_dim, "end": mod.end_dim})
    if isinstance(mod, nn.Identity) or (isinstance(mod, nn.Dropout) and mod.p == 0):
        return Layer(name, "identity", inputs)
    raise UnsupportedNetwork(f"{prefix}: {type(mod).__name__} is not translated to other frameworks")


_FUNCTIONS = {torch.relu: "relu", nn.functional.relu: "relu", operator.add: "add", torch.add: "add"}


def trace(model: nn.Module) -> Graph:
    """The model's layers in execution order (:class:`UnsupportedNetwork` for anything else)."""
    leaves = (nn.Linear, nn.Conv2d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm, nn.ReLU, nn.Flatten,
              nn.Identity, nn.Dropout, nn.MaxPool2d)

    class Tracer(fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, leaves) or super().is_leaf_module(m, qualname)

    try:
        gm = fx.GraphModule(model, Tracer().trace(model))
    except Exception as exc:  # noqa: BLE001 - any trace failure means: not translatable
        raise UnsupportedNetwork(f"the model cannot be traced (torch.fx): {exc}".splitlines()[0]) from exc
    modules = dict(gm.named_modules())
    layers: list[Layer] = []
    inp = out = ""
    for node in gm.graph.nodes:
        args = tuple(str(a) for a in node.args if isinstance(a, fx.Node))
        if node.op == "placeholder":
            inp = node.name
        elif node.op == "output":
            out = str(node.args[0])
        elif node.op == "call_module":
            layers.append(_module_layer(node.name, str(node.target), modules[str(node.target)], args))
        elif node.op == "call_function" and node.target in _FUNCTIONS and len(args) == len(node.args):
            layers.append(Layer(node.name, _FUNCTIONS[node.target], args))
        elif node.op == "call_method" and node.target == "mean" and len(node.args) <= 2:
            dims = node.kwargs.get("dim")
            if dims is None and len(node.args) > 1:
                dims = node.args[1]
            dims = (dims,) if isinstance(dims, int) else tuple(dims or ())
            layers.append(Layer(node.name, "mean", args, {"dims": dims, "keepdim": bool(node.kwargs.get("keepdim"))}))
        else:
            raise UnsupportedNetwork(f"{node.op} {node.target} ({node.name}) is not translated to other frameworks")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    used = {p for layer in layers for p in layer.params.values()}
    if used != set(shapes):
        raise UnsupportedNetwork(f"parameters outside translated layers: {sorted(set(shapes) - used)}")
    buffers = dict(model.named_buffers())
    buffer_shapes = {b: tuple(buffers[b].shape) for layer in layers for b in layer.buffers.values()}
    return Graph(inp, out, tuple(layers), shapes, buffer_shapes)


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
