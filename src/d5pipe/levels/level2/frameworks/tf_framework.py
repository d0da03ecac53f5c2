"""TensorFlow as a training framework: the traced :class:`~.graph.Graph` built from TensorFlow ops,
the step (loss, ``tf.GradientTape``, a ``keras.optimizers`` update) one ``tf.function`` graph.

Built as TensorFlow runs fastest on a CPU: channels-last (:func:`~.graph.channels_last`; the
convolution weights HWIO from :meth:`~TensorFlowFramework.prepare` on, the batch transposed once at
the start of the step), with TensorFlow's performance defaults -- oneDNN's kernels on unless the
environment sets ``TF_ENABLE_ONEDNN_OPTS=0`` (read once per process; a float64 check needs no
switch: oneDNN has no float64 kernels). Pinned before TensorFlow starts and recorded: the intra- and
inter-op thread pools (``tf.config.threading``; a later point of the process that asks for other
threads fails, d5pipe.levels.framework_threads); recorded: whether oneDNN runs.
Conventions that differ from torch's, and how the spec is met: torch's SGD decay joins the
gradient (keras's ``weight_decay`` is decoupled), so d5pipe adds ``weight_decay * w`` to the
gradient for ``sgd`` and ``adam``; keras keeps the learning rate and momentum in its float type,
which d5pipe sets to the run's dtype while it builds the optimizer (``keras.config.set_floatx``,
restored after); keras's Adam puts epsilon inside the bias correction
(``eps * sqrt(1 - beta2^t)`` in torch's terms) -- left as keras has it, and recorded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.declare import Builtin, package_versions
from d5pipe.levels.framework_threads import import_tensorflow
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec, UnsupportedNetwork
from d5pipe.levels.level2.frameworks.graph import Graph, Layer, interpret, native_ops, running_update


def _onednn() -> bool:
    """Whether TensorFlow runs its oneDNN kernels (read once per process, from TF_ENABLE_ONEDNN_OPTS)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _ops(tf: Any) -> dict[str, Callable[..., Any]]:
    """Every kind of graph.KINDS but graph.common_ops's: those of graph.CHANNELS_LAST for NHWC values,
    the others for values as torch lays them out (graph.channels_last hands them so)."""
    def linear(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # one 2-D MatMul: a broadcast batched one is slower
        flat = tf.reshape(x, (-1, x.shape[-1])) if len(x.shape) > 2 else x
        out = tf.matmul(flat, p["weight"], transpose_b=True)
        out = out + p["bias"] if "bias" in p else out
        return tf.reshape(out, (*x.shape[:-1], out.shape[-1])) if len(x.shape) > 2 else out

    def conv2d(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # NHWC, the weight HWIO
        a = layer.attrs
        if a["groups"] != 1:
            raise UnsupportedNetwork("tensorflow: grouped convolutions are not translated")
        (ph, pw), (dh, dw) = a["padding"], a["dilation"]
        kh, kw = p["weight"].shape[:2]
        # padding=[[..]] in tf.nn.conv2d takes a slow kernel (ResNet-50 1.6x slower): "SAME" where it pads as
        # torch does (stride 1, odd kernel), else tf.pad and "VALID"
        same = a["stride"] == (1, 1) and (2 * ph, 2 * pw) == (dh * (kh - 1), dw * (kw - 1))
        if (ph or pw) and not same:
            x = tf.pad(x, [[0, 0], [ph, ph], [pw, pw], [0, 0]])
        out = tf.nn.conv2d(x, p["weight"], strides=(1, *a["stride"], 1), padding="SAME" if same else "VALID",
                           dilations=(1, dh, dw, 1))
        return out + p["bias"] if "bias" in p else out

    def affine(x: Any, p: dict[str, Any], shape: tuple[int, ...]) -> Any:
        if "weight" in p:
            x = x * tf.reshape(p["weight"], shape)
        return x + tf.reshape(p["bias"], shape) if "bias" in p else x

    def normalize(x: Any, axes: list[int], eps: float) -> Any:
        mean = tf.reduce_mean(x, axis=axes, keepdims=True)
        var = tf.reduce_mean(tf.square(x - mean), axis=axes, keepdims=True)
        return (x - mean) / tf.sqrt(var + eps)

    def group_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        shape = tf.shape(x)
        z = normalize(tf.reshape(x, (shape[0], layer.attrs["groups"], -1)), [2], layer.attrs["eps"])
        return affine(tf.reshape(z, shape), p, (1, -1) + (1,) * (len(x.shape) - 2))

    def layer_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # one pass of moments, as keras's
        dims = layer.attrs["dims"]
        mean, var = tf.nn.moments(x, axes=list(range(len(x.shape) - dims, len(x.shape))), keepdims=True)
        return tf.nn.batch_normalization(x, mean, var, p.get("bias"), p.get("weight"), layer.attrs["eps"])

    def max_pool2d(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # padding is -inf, as torch's
        (kh, kw), (sh, sw), (ph, pw) = layer.attrs["kernel"], layer.attrs["stride"], layer.attrs["padding"]
        padded = tf.pad(x, [[0, 0], [ph, ph], [pw, pw], [0, 0]], constant_values=float("-inf"))
        return tf.nn.max_pool2d(padded, (kh, kw), (sh, sw), "VALID")

    def flatten(layer: Layer, p: dict[str, Any], x: Any) -> Any:
        nd = len(x.shape)
        start, end = layer.attrs["start"] % nd, layer.attrs["end"] % nd
        return tf.reshape(x, (*tf.unstack(tf.shape(x)[:start]), -1, *x.shape[end + 1:]))

    def batch_norm(layer: Layer, p: dict[str, Any], x: Any) -> Any:  # training mode: batch statistics
        mean, var = tf.nn.moments(x, axes=[0, 1, 2])  # biased, as torch normalises; one pass, as keras's
        return tf.nn.batch_normalization(x, mean, var, p.get("bias"), p.get("weight"), layer.attrs["eps"])

    def batch_stats(layer: Layer, p: dict[str, Any], x: Any) -> tuple[Any, Any]:  # for the running statistics
        mean, var = tf.nn.moments(x, axes=[0, 1, 2])  # the same moments as the batch norm's
        n = tf.cast(tf.size(x) // tf.shape(x)[3], x.dtype)
        return mean, var * n / (n - 1)

    def attention(layer: Layer, p: dict[str, Any], q: Any, k: Any, v: Any) -> Any:  # batched MatMuls, as keras's
        scores = tf.matmul(q, k, transpose_b=True) * tf.cast(layer.attrs["scale"], q.dtype)
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)

    return {
        "linear": linear, "conv2d": conv2d, "group_norm": group_norm, "layer_norm": layer_norm, "flatten": flatten,
        "batch_stats": batch_stats, "max_pool2d": max_pool2d, "attention": attention,
        "batch_norm": batch_norm,
        "relu": lambda layer, p, x: tf.nn.relu(x),
        "gelu": lambda layer, p, x: tf.nn.gelu(x, approximate=layer.attrs["approximate"] == "tanh"),
        "softmax": lambda layer, p, x: tf.nn.softmax(x, axis=layer.attrs["dim"]),
        "matmul": lambda layer, p, a, b: tf.matmul(a, b),
        "mean": lambda layer, p, x: tf.reduce_mean(x, axis=list(layer.attrs["dims"]), keepdims=layer.attrs["keepdim"]),
        "reshape": lambda layer, p, x: tf.reshape(x, layer.attrs["shape"]),
        "expand": lambda layer, p, x: tf.broadcast_to(x, layer.attrs["shape"]),
        "permute": lambda layer, p, x: tf.transpose(x, layer.attrs["perm"]),
        "cat": lambda layer, p, *xs: tf.concat(xs, axis=layer.attrs["dim"]),
    }


def keras_optimizer(keras: Any, spec: OptimizerSpec) -> tuple[Any, bool, str]:
    """The spec as a keras optimizer; whether d5pipe adds the decay to the gradient; how it was named."""
    b1, b2 = spec.betas
    if spec.name == "sgd":
        return (keras.optimizers.SGD(learning_rate=spec.lr, momentum=spec.momentum, nesterov=False), True,
                f"keras.optimizers.SGD(lr, momentum={spec.momentum}); L2 {spec.weight_decay} added to the gradient")
    if spec.name == "adam":
        return (keras.optimizers.Adam(learning_rate=spec.lr, beta_1=b1, beta_2=b2, epsilon=spec.eps), True,
                f"keras.optimizers.Adam(lr, b1, b2, epsilon={spec.eps}: inside the bias correction); "
                f"L2 {spec.weight_decay} added to the gradient")
    return (keras.optimizers.AdamW(learning_rate=spec.lr, weight_decay=spec.weight_decay, beta_1=b1, beta_2=b2,
                                   epsilon=spec.eps), False,
            f"keras.optimizers.AdamW(lr, weight_decay={spec.weight_decay}, epsilon={spec.eps}: inside the bias correction)")


class TensorFlowFramework:
    """``dtype``: float32 or float64."""

    name = "tensorflow"

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = dtype

    def versions(self) -> dict[str, str]:
        return package_versions("tensorflow", "keras")

    def prepare(self, graph: Graph, weights: dict[str, np.ndarray], optimizer: OptimizerSpec,
                example: tuple[np.ndarray, np.ndarray], threads: int) -> dict[str, Any]:
        tf = import_tensorflow(threads, threads)
        import keras

        ops = native_ops(graph, _ops(tf), "tensorflow", tf.transpose)
        names = list(graph.shapes)
        start = graph.hwio({n: np.asarray(weights[n], dtype=self.dtype) for n in names})
        self.vars = [keras.Variable(start[n], dtype=self.dtype, name=f"p{i}") for i, n in enumerate(names)]
        self.buffers = {n: tf.Variable(np.asarray(weights[n], dtype=self.dtype), trainable=False)
                        for n in graph.buffer_shapes}
        self.names, self.graph = names, graph
        floatx = keras.config.floatx()
        keras.config.set_floatx(self.dtype)  # the optimizer's learning rate and momentum variables in the point's dtype
        opt, coupled, named = keras_optimizer(keras, optimizer)
        opt.build(self.vars)
        keras.config.set_floatx(floatx)  # a process-wide switch: nothing later in the process sees the point's
        decay = optimizer.weight_decay if coupled else 0.0

        def keep(layer: Layer, stats: tuple[Any, Any]) -> None:
            for role, batch in zip(("mean", "var"), stats):
                buf = self.buffers[layer.buffers[role]]
                buf.assign(running_update(buf, tf.stop_gradient(batch), layer.attrs["momentum"]))

        def forward(x: Any) -> Any:
            return interpret(graph, ops, dict(zip(names, (v.value for v in self.vars))), x, keep)

        @tf.function(jit_compile=False, reduce_retracing=True)
        def train_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=forward(x)))
            grads = tape.gradient(loss, [v.value for v in self.vars])
            if decay:
                grads = [g + decay * v.value for g, v in zip(grads, self.vars)]
            opt.apply_gradients(zip(grads, self.vars))
            return loss

        self.train_step = train_step
        self._tf = tf
        state = [*self.vars, *opt.variables, *self.buffers.values()]
        saved = [v.numpy().copy() for v in state]
        t0 = time.perf_counter()  # trace, optimise and run the graph once; the state is then restored
        self.train_step(*self.tensors(*example)).numpy()
        self.compile_s = time.perf_counter() - t0
        for v, s in zip(state, saved):
            v.assign(s)
        return {"threads": threads, "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
                "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""), "onednn": _onednn(),
                "layout": "NHWC: the batch transposed at the start of the step; convolution weights HWIO, "
                          "converted once here", "dtype": self.dtype,
                "optimizer": named, "compiler": "tf.function (graph, jit_compile=False)"}

    def tensors(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        tf = self._tf
        return tf.constant(x, dtype=self.dtype), tf.constant(y, dtype=tf.int32)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self.train_step(*self.tensors(x, y)).numpy())

    def weights(self) -> dict[str, np.ndarray]:
        out = {n: np.asarray(v.numpy(), dtype=np.float64) for n, v in zip(self.names, self.vars)}
        return self.graph.hwio(out, back=True) | {n: np.asarray(v.numpy(), dtype=np.float64)
                                                  for n, v in self.buffers.items()}

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]:
        """TensorFlow's profiler: the ops a training step ran, per op type
        (d5pipe.levels.declare.Profiles); no Chrome trace."""
        from d5pipe.measure.xplane import profile_tf

        return profile_tf(self._tf, step, iterations, trace, "train_step")


FRAMEWORK = Builtin("tensorflow", f"{__name__}.TensorFlowFramework", packages=("tensorflow",))
