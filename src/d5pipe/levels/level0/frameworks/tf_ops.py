"""TensorFlow for level 0: each operator as TensorFlow's own eager ops (``tf.nn``, ``tf.linalg``),
convolution NHWC/HWIO (the only layout of TensorFlow's CPU convolutions), oneDNN as TensorFlow's
default leaves it; each call ended by ``.numpy()`` on its result (eager CPU ops return computed
tensors; reading the result makes the wait explicit). Gradients by ``tf.GradientTape``.

Threads: the intra-op pool is set to the point's threads and the inter-op pool to 1 before
TensorFlow's runtime starts, and held there for every point of the process; a point that asks
for other threads once the runtime has started fails (d5pipe.levels.framework_threads). What it
runs with is recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.framework_threads import import_tensorflow
from d5pipe.levels.level0.frameworks.contract import Engine, Framework, NativeOp, from_layout, input_layouts, to_layout

NHWC, HWIO = (0, 2, 3, 1), (2, 3, 1, 0)


def builtins(tf: Any) -> dict[str, NativeOp]:
    """The built-in operators in TensorFlow's own idiom; keywords bound by ``functools.partial``, not a
    lambda: each Python frame between the timed call and the op costs (TensorFlow captures the
    caller's stack at every eager op; benchmarks/bench_level0_frameworks.py)."""

    def layer_norm(x: Any, w: Any, b: Any) -> Any:  # as keras.layers.LayerNormalization computes it
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, var, b, w, 1e-5)

    def sdpa(q: Any, k: Any, v: Any) -> Any:  # as keras.layers.MultiHeadAttention computes it
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(q.shape[-1]))
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)

    return {
        "matmul": NativeOp(tf.linalg.matmul, form="tf.linalg.matmul"),
        "bmm": NativeOp(tf.linalg.matmul, form="tf.linalg.matmul"),
        "conv2d": NativeOp(partial(tf.nn.conv2d, strides=1, padding="SAME"), (NHWC, HWIO), NHWC,
                           "tf.nn.conv2d NHWC/HWIO, SAME"),
        "sdpa": NativeOp(sdpa, form="tf.matmul, tf.nn.softmax, tf.matmul (keras MultiHeadAttention's)"),
        "layer_norm": NativeOp(layer_norm, form="tf.nn.moments + tf.nn.batch_normalization (keras LayerNormalization's)"),
        "softmax": NativeOp(partial(tf.nn.softmax, axis=-1), form="tf.nn.softmax"),
        "gelu": NativeOp(partial(tf.nn.gelu, approximate=False), form="tf.nn.gelu(approximate=False)"),
        "sum": NativeOp(partial(tf.reduce_sum, axis=-1), form="tf.reduce_sum"),
    }


class TfPrepared:
    """One operator on its eager tensors."""

    compile_s = 0.0

    def __init__(self, tf: Any, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> None:
        self._tf, self._op, self._fn, self._dtype = tf, op, op.fn, getattr(tf, dtype)
        self._xs = [tf.constant(to_layout(a, lay).astype(self._dtype.as_numpy_dtype))
                    for a, lay in zip(inputs, input_layouts(op, len(inputs)), strict=True)]

    def call(self) -> None:
        self._fn(*self._xs).numpy()

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]:
        """TensorFlow's profiler: the ops ``step`` ran (d5pipe.levels.declare.Profiles)."""
        from d5pipe.measure.xplane import profile_tf

        return profile_tf(self._tf, step, iterations, trace, "forward")

    def output(self) -> np.ndarray:
        return from_layout(self._op.fn(*self._xs).numpy(), self._op.output)

    def gradients(self, upstream: np.ndarray) -> list[np.ndarray | None]:
        tf = self._tf
        with tf.GradientTape() as tape:
            tape.watch(self._xs)
            out = self._op.fn(*self._xs)
        up = tf.constant(to_layout(upstream, self._op.output).astype(out.dtype.as_numpy_dtype))
        grads = tape.gradient(out, self._xs, output_gradients=up)
        layouts = input_layouts(self._op, len(self._xs))
        return [None if g is None else from_layout(g.numpy(), lay) for g, lay in zip(grads, layouts, strict=True)]


class TfEngine(Engine):
    """TensorFlow on the CPU with the point's threads."""

    name = "tensorflow"

    def __init__(self, threads: int) -> None:
        self._tf = tf = import_tensorflow(threads, 1)
        self._threads = threads
        self.ops = builtins(tf)
        threading = tf.config.threading
        self.told = {"intra_op_threads": threading.get_intra_op_parallelism_threads(),
                     "inter_op_threads": threading.get_inter_op_parallelism_threads(),
                     "threads": "pinned for every point of this process", "eager": True}

    def session(self, dtype: str) -> AbstractContextManager[Any]:
        """Nothing to switch; the pools checked again for this point (another engine may have set
        them while the runtime had not started)."""
        import_tensorflow(self._threads, 1)
        return super().session(dtype)

    def prepare(self, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> TfPrepared:
        return TfPrepared(self._tf, op, inputs, dtype)


ENGINE: Callable[[int], TfEngine] = TfEngine

FRAMEWORK = Framework(
    name="tensorflow", title="TensorFlow (eager)", packages=("tensorflow",), differentiates=True,
    dtypes=("float64", "float32", "bfloat16", "float16"),
    sync=".numpy() on each call's result", gradient="tf.GradientTape", engine=ENGINE,
    notes=("eager ops, oneDNN as TensorFlow defaults", "convolution NHWC/HWIO"),
)
"""The declaration of ``operators.framework: tensorflow``."""
