"""JAX (XLA) for level 0: each operator as one ``jax.jit``-compiled function (the compilation is the
first call's, reported as ``compile_s``), convolution and attention in XLA's preferred layouts
(NHWC/HWIO, BTNH), each call ended by ``block_until_ready``; gradients by ``jax.vjp``. A float64
point runs under ``jax.enable_x64`` for that point only.

Threads: XLA sizes its CPU thread pools when jax's backend starts, from ``XLA_FLAGS``; unless the
environment sets it, this sets ``intra_op_parallelism_threads`` to the point's threads first (what
XLA_FLAGS held is recorded); a later point of the process that asks for other threads fails
(d5pipe.levels.framework_threads).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.framework_threads import import_jax
from d5pipe.levels.level0.frameworks.contract import Engine, Framework, NativeOp, from_layout, input_layouts, to_layout

NHWC, HWIO, BTNH = (0, 2, 3, 1), (2, 3, 1, 0), (0, 2, 1, 3)


def builtins(jax: Any) -> dict[str, NativeOp]:
    """The built-in operators in JAX's own idiom."""
    jnp, lax = jax.numpy, jax.lax

    def conv2d(x: Any, w: Any) -> Any:
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def layer_norm(x: Any, w: Any, b: Any) -> Any:  # as flax.linen.LayerNorm computes it
        mean = x.mean(axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5) * w + b

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return jax.nn.dot_product_attention(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]))

    return {
        "matmul": NativeOp(jnp.matmul, form="jnp.matmul"),
        "bmm": NativeOp(jnp.matmul, form="jnp.matmul"),
        "conv2d": NativeOp(conv2d, (NHWC, HWIO), NHWC, "lax.conv_general_dilated NHWC/HWIO"),
        "sdpa": NativeOp(sdpa, (BTNH,) * 3, BTNH, "jax.nn.dot_product_attention BTNH"),
        "layer_norm": NativeOp(layer_norm, form="mean, var, rsqrt (flax.linen.LayerNorm's)"),
        "softmax": NativeOp(lambda x: jax.nn.softmax(x, axis=-1), form="jax.nn.softmax"),
        "gelu": NativeOp(lambda x: jax.nn.gelu(x, approximate=False), form="jax.nn.gelu(approximate=False)"),
        "sum": NativeOp(lambda x: jnp.sum(x, axis=-1), form="jnp.sum"),
    }


class JaxPrepared:
    """One jitted operator on its device arrays."""

    def __init__(self, jax: Any, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> None:
        self._jax, self._op, self._dtype = jax, op, np.dtype(getattr(jax.numpy, dtype))
        self._xs = [jax.device_put(to_layout(a, lay).astype(self._dtype))
                    for a, lay in zip(inputs, input_layouts(op, len(inputs)), strict=True)]
        self._fn = jax.jit(op.fn)
        start = time.perf_counter()
        self._fn(*self._xs).block_until_ready()
        self.compile_s = time.perf_counter() - start

    def call(self) -> None:
        self._fn(*self._xs).block_until_ready()

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]:
        """``jax.profiler``: the kernels XLA ran for ``step`` (d5pipe.levels.declare.Profiles)."""
        from d5pipe.measure.xplane import profile_jax

        return profile_jax(self._jax, step, iterations, trace, "forward")

    def output(self) -> np.ndarray:
        return from_layout(np.asarray(self._fn(*self._xs)), self._op.output)

    def gradients(self, upstream: np.ndarray) -> list[np.ndarray | None]:
        out, vjp = self._jax.vjp(self._op.fn, *self._xs)
        up = self._jax.device_put(to_layout(upstream, self._op.output).astype(np.dtype(out.dtype)))
        layouts = input_layouts(self._op, len(self._xs))
        return [from_layout(np.asarray(g), lay) for g, lay in zip(vjp(up), layouts, strict=True)]


class JaxEngine(Engine):
    """JAX on the CPU with the point's threads."""

    name = "jax"

    def __init__(self, threads: int) -> None:
        self._jax = jax = import_jax(threads)
        self._threads = threads
        self.ops = builtins(jax)
        self.told = {"XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "backend": jax.default_backend(),
                     "jit": True, "x64": "float64 points only, restored after each"}

    def session(self, dtype: str) -> AbstractContextManager[Any]:
        """x64 mode for a float64 point only; any other runs as a user's program would, untouched.
        XLA's pools are checked again for this point (another engine may have been made first)."""
        import_jax(self._threads)
        return self._jax.enable_x64(True) if dtype == "float64" else nullcontext()

    def prepare(self, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> JaxPrepared:
        return JaxPrepared(self._jax, op, inputs, dtype)


ENGINE: Callable[[int], JaxEngine] = JaxEngine

FRAMEWORK = Framework(
    name="jax", title="JAX (XLA)", packages=("jax", "jaxlib"), differentiates=True,
    dtypes=("float64", "float32", "bfloat16", "float16"),
    sync="jax.Array.block_until_ready() on each call's result", gradient="jax.vjp", engine=ENGINE,
    notes=("every operator under jax.jit (compile time apart, compile_s)", "convolution NHWC/HWIO, attention BTNH",
           "float64 under jax.enable_x64 for that point only"),
)
"""The declaration of ``operators.framework: jax``."""
