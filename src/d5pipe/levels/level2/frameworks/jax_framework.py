"""JAX (XLA) as a training framework: the traced :class:`~.graph.Graph` built as a pure function of
the parameters, the step (loss, gradients, optax update) compiled once with ``jax.jit`` for the
example batch's shapes -- that compile is :meth:`JaxFramework.prepare`'s, never a step's. Built
channels-last, as XLA's CPU convolutions run fastest (:func:`~.graph.channels_last`; convolution
weights HWIO from ``prepare`` on, the batch transposed at the start of the step); a float64 run
switches jax's x64 mode on for its own calls only.

Threads: XLA's CPU thread pools are sized when jax's backend starts, from ``XLA_FLAGS``; unless
the environment sets it, d5pipe sets ``intra_op_parallelism_threads`` to the point's threads (and
``--xla_cpu_multi_thread_eigen=false`` for one thread) before then; a later point of the
process that asks for other threads fails (d5pipe.levels.framework_threads). What XLA_FLAGS holds
is recorded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.declare import Builtin, package_versions
from d5pipe.levels.framework_threads import import_jax
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
from d5pipe.levels.level2.frameworks.graph import Graph, Layer, interpret, native_ops, running_update


def _ops(jnp: Any, lax: Any, nn: Any) -> dict[str, Callable[..., Any]]:
    """Every kind of graph.KINDS but graph.common_ops's: those of graph.CHANNELS_LAST for NHWC values,
    the others for values as torch lays them out (graph.channels_last hands them so)."""
    def linear(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        out = x @ p["weight"].T
        return out + p["bias"] if "bias" in p else out

    def conv2d(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # NHWC, the weight HWIO
        a = layer.attrs
        out = lax.conv_general_dilated(x, p["weight"], window_strides=a["stride"],
                                       padding=[(a["padding"][0],) * 2, (a["padding"][1],) * 2],
                                       rhs_dilation=a["dilation"], feature_group_count=a["groups"],
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return out + p["bias"] if "bias" in p else out

    def affine(x: Any, p: dict[str, Any], shape: tuple[int, ...]) -> Any:
        if "weight" in p:
            x = x * p["weight"].reshape(shape)
        return x + p["bias"].reshape(shape) if "bias" in p else x

    def normalize(x: Any, axes: tuple[int, ...], eps: float) -> Any:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased, as torch normalises
        return (x - mean) / jnp.sqrt(var + eps)

    def batch_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # training mode: batch statistics
        return affine(normalize(x, (0, 1, 2), layer.attrs["eps"]), p, (-1,))

    def batch_stats(layer: Layer, p: dict[str, Any], x: Any) -> tuple[Any, Any]:  # for the running statistics
        mean = x.mean(axis=(0, 1, 2))
        n = x.size // x.shape[3]
        return mean, ((x - mean) ** 2).sum(axis=(0, 1, 2)) / (n - 1)

    def group_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        n, c = x.shape[:2]
        g = layer.attrs["groups"]
        z = normalize(x.reshape((n, g, -1)), (2,), layer.attrs["eps"]).reshape(x.shape)
        return affine(z, p, (1, c) + (1,) * (x.ndim - 2))

    def layer_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        dims = layer.attrs["dims"]
        return affine(normalize(x, tuple(range(x.ndim - dims, x.ndim)), layer.attrs["eps"]), p, x.shape[-dims:])

    def max_pool2d(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # padding is -inf, as torch's
        (kh, kw), (sh, sw), (ph, pw) = layer.attrs["kernel"], layer.attrs["stride"], layer.attrs["padding"]
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, kh, kw, 1), (1, sh, sw, 1),
                                 ((0, 0), (ph, ph), (pw, pw), (0, 0)))

    def flatten(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        start, end = layer.attrs["start"] % x.ndim, layer.attrs["end"] % x.ndim
        return x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1:])

    def attention(layer: Layer, p: dict[str, Any], q: Any, k: Any, v: Any) -> Any:  # XLA fuses the scale and transposes
        scores = jnp.einsum("...qd,...kd->...qk", q, k) * layer.attrs["scale"]
        return jnp.einsum("...qk,...kd->...qd", nn.softmax(scores, axis=-1), v)

    return {
        "linear": linear, "conv2d": conv2d, "batch_norm": batch_norm, "batch_stats": batch_stats, "group_norm": group_norm,
        "layer_norm": layer_norm, "flatten": flatten, "max_pool2d": max_pool2d, "attention": attention,
        "relu": lambda layer, p, x: jnp.maximum(x, 0),
        "gelu": lambda layer, p, x: nn.gelu(x, approximate=layer.attrs["approximate"] == "tanh"),
        "softmax": lambda layer, p, x: nn.softmax(x, axis=layer.attrs["dim"]),
        "matmul": lambda layer, p, a, b: jnp.matmul(a, b),
        "mean": lambda layer, p, x: x.mean(axis=layer.attrs["dims"], keepdims=layer.attrs["keepdim"]),
        "reshape": lambda layer, p, x: x.reshape(layer.attrs["shape"]),
        "expand": lambda layer, p, x: jnp.broadcast_to(x, layer.attrs["shape"]),
        "permute": lambda layer, p, x: jnp.transpose(x, layer.attrs["perm"]),
        "cat": lambda layer, p, *xs: jnp.concatenate(xs, axis=layer.attrs["dim"]),
    }


def optax_optimizer(optax: Any, spec: OptimizerSpec) -> tuple[Any, str]:
    """The spec as optax transformations, and how they were named."""
    b1, b2 = spec.betas
    if spec.name == "adamw":
        return (optax.adamw(spec.lr, b1=b1, b2=b2, eps=spec.eps, weight_decay=spec.weight_decay),
                f"optax.adamw(lr, b1, b2, eps={spec.eps}, weight_decay={spec.weight_decay})")
    if spec.name == "sgd":
        core = optax.sgd(spec.lr, momentum=spec.momentum or None, nesterov=False)
        named = f"optax.sgd(lr, momentum={spec.momentum}, nesterov=False)"
    else:
        core = optax.adam(spec.lr, b1=b1, b2=b2, eps=spec.eps, eps_root=0.0)
        named = f"optax.adam(lr, b1, b2, eps={spec.eps}, eps_root=0)"
    if spec.weight_decay:  # torch's L2 convention: the decay joins the gradient before the optimizer
        return (optax.chain(optax.add_decayed_weights(spec.weight_decay), core),
                f"optax.chain(add_decayed_weights({spec.weight_decay}), {named})")
    return core, named


class JaxFramework:
    """``dtype``: float32, or float64 (jax's x64 mode, on inside this framework's calls only)."""

    name = "jax"

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = dtype

    def versions(self) -> dict[str, str]:
        return package_versions("jax", "jaxlib", "optax")

    def prepare(self, graph: Graph, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        """Under jax's x64 mode for float64 only, and matmuls at full precision: both process-wide
        switches, pinned here and in :meth:`step` and restored on leaving, so nothing later in the
        process (a float32 run after the float64 check) runs under them."""
        jax = import_jax(threads)
        self._x64 = jax.enable_x64(self.dtype == "float64")
        with self._x64, jax.default_matmul_precision("highest"):
            import optax
            from jax import lax
            from jax import numpy as jnp

            ops = native_ops(graph, _ops(jnp, lax, jax.nn), "jax", jnp.transpose)

            def forward(params: dict[str, Any], buffers: dict[str, Any], x: Any) -> tuple[Any, dict[str, Any]]:
                new = dict(buffers)

                def keep(layer: Layer, stats: tuple[Any, Any]) -> None:
                    for role, batch in zip(("mean", "var"), stats):
                        name = layer.buffers[role]
                        new[name] = running_update(buffers[name], lax.stop_gradient(batch), layer.attrs["momentum"])

                return interpret(graph, ops, params, x, keep), new

            def loss_fn(params: dict[str, Any], buffers: dict[str, Any], x: Any, y: Any) -> Any:
                logits, new = forward(params, buffers, x)
                logp = jax.nn.log_softmax(logits)
                return -jnp.take_along_axis(logp, y[:, None], axis=1).mean(), new

            tx, named = optax_optimizer(optax, optimizer)

            def train_step(params: Any, buffers: Any, state: Any, x: Any, y: Any) -> Any:
                (loss, buffers), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, buffers, x, y)
                updates, state = tx.update(grads, state, params)
                return optax.apply_updates(params, updates), buffers, state, loss

            self.graph = graph
            self.params = {n: jnp.asarray(w) for n, w in graph.hwio(
                {n: np.asarray(weights[n], dtype=self.dtype) for n in graph.shapes}).items()}
            self.buffers = {n: jnp.asarray(np.asarray(weights[n], dtype=self.dtype)) for n in graph.buffer_shapes}
            self.state = tx.init(self.params)
            x, y = example
            t0 = time.perf_counter()
            self.compiled_step = jax.jit(train_step, donate_argnums=(0, 1, 2)).lower(
                self.params, self.buffers, self.state, jnp.asarray(x, self.dtype), jnp.asarray(y, jnp.int32)).compile()
            self.compile_s = time.perf_counter() - t0
            return {"threads": threads, "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "dtype": self.dtype,
                    "jax_enable_x64": bool(jax.config.jax_enable_x64), "matmul_precision": "highest",
                    "layout": "NHWC: the batch transposed at the start of the step; convolution weights HWIO, "
                              "converted once here", "optimizer": named, "compiler": "jax.jit (XLA)",
                    "devices": [str(d) for d in jax.devices()]}

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        # numpy in, as a plain loop hands it over (jnp.asarray would dispatch a conversion of its own)
        with self._x64:
            self.params, self.buffers, self.state, loss = self.compiled_step(
                self.params, self.buffers, self.state, x.astype(self.dtype, copy=False), y.astype(np.int32))
            return float(loss)  # waits for the executable, which writes the loss and the update together

    def weights(self) -> dict[str, np.ndarray]:
        return self.graph.hwio({n: np.asarray(w, dtype=np.float64) for n, w in {**self.params, **self.buffers}.items()},
                               back=True)

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]:
        """``jax.profiler``: the kernels XLA's CPU runtime ran (its fusions, not jax.numpy's ops)
        with their time, and JAX's Chrome trace (d5pipe.levels.declare.Profiles)."""
        import jax

        from d5pipe.measure.xplane import profile_jax

        return profile_jax(jax, step, iterations, trace, "train_step")


FRAMEWORK = Builtin("jax", f"{__name__}.JaxFramework", packages=("optax", "jax"))
