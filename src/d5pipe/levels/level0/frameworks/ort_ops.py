"""ONNX Runtime for level 0: each operator as a one-node ONNX graph (opset 23: ``MatMul``, ``Conv``,
``Attention``, ``LayerNormalization``, ``Softmax``, ``Gelu``, ``ReduceSum``) in an
``InferenceSession`` with ONNX Runtime's default graph optimisations, built once per point (its
build is ``compile_s``); ``session.run`` returns computed NumPy arrays. Forward only: ONNX Runtime
has no gradients, so no gradient check runs (the record says so). An operator without a CPU kernel
in the point's dtype (float64 ``Conv``) is skipped with ONNX Runtime's message.

A user operator for ONNX Runtime is ``fn(dtype, shapes) -> onnx.ModelProto``: a graph whose inputs
are the operator's, in order, and whose first output is its result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from d5pipe.levels.contract import PointSkipped
from d5pipe.levels.level0.frameworks.contract import Engine, Framework, NativeOp, from_layout
from d5pipe.levels.ort_profile import ort_profile

OPSET = 23


def node_model(op_type: str, n_inputs: int, **attrs: Any) -> Callable[[str, Sequence[tuple[int, ...]]], Any]:
    """``fn(dtype, shapes)`` of a graph of one ``op_type`` node over ``n_inputs`` inputs (the rest of
    ``attrs`` are the node's attributes; ``axes`` becomes a constant input, as opset 13+ wants)."""

    def build(dtype: str, shapes: Sequence[tuple[int, ...]]) -> Any:
        from onnx import TensorProto, helper, numpy_helper

        elem = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}[dtype]
        names = [f"x{i}" for i in range(n_inputs)]
        node_attrs = {k: v for k, v in attrs.items() if k != "axes"}
        consts = [numpy_helper.from_array(np.array(attrs["axes"], dtype=np.int64), "axes")] if "axes" in attrs else []
        node = helper.make_node(op_type, names + [c.name for c in consts], ["y"], **node_attrs)
        graph = helper.make_graph([node], op_type, [helper.make_tensor_value_info(n, elem, list(s))
                                                    for n, s in zip(names, shapes, strict=True)],
                                  [helper.make_tensor_value_info("y", elem, None)], initializer=consts)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])

    return build


BUILTINS: dict[str, NativeOp] = {
    "matmul": NativeOp(node_model("MatMul", 2), form="MatMul"),
    "bmm": NativeOp(node_model("MatMul", 2), form="MatMul"),
    "conv2d": NativeOp(node_model("Conv", 2, pads=[1, 1, 1, 1]), form="Conv NCHW, pads 1"),
    "sdpa": NativeOp(node_model("Attention", 3), form="Attention (opset 23), 4-D q, k, v"),
    "layer_norm": NativeOp(node_model("LayerNormalization", 3, axis=-1, epsilon=1e-5), form="LayerNormalization"),
    "softmax": NativeOp(node_model("Softmax", 1, axis=-1), form="Softmax"),
    "gelu": NativeOp(node_model("Gelu", 1, approximate="none"), form="Gelu (opset 20)"),
    "sum": NativeOp(node_model("ReduceSum", 1, axes=[-1], keepdims=0), form="ReduceSum"),
}


class OrtPrepared:
    """One operator's session and its feed."""

    def __init__(self, ort: Any, options: Any, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> None:
        arrays = [np.ascontiguousarray(a, dtype=np.dtype(dtype)) for a in inputs]
        model = op.fn(dtype, [a.shape for a in arrays])
        start = time.perf_counter()
        try:
            self._session = ort.InferenceSession(model.SerializeToString(), options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - ONNX Runtime raises its own exception types
            if "NOT_IMPLEMENTED" in str(err):
                raise PointSkipped(f"onnxruntime has no CPU kernel here: {str(err).splitlines()[0]}") from err
            raise
        self.compile_s = time.perf_counter() - start
        self._feed = {i.name: a for i, a in zip(self._session.get_inputs(), arrays, strict=True)}
        self._op, self._model, self._options = op, model.SerializeToString(), options

    def call(self) -> None:
        self._session.run(None, self._feed)

    def output(self) -> np.ndarray:
        return from_layout(self._session.run(None, self._feed)[0], self._op.output)

    def gradients(self, upstream: np.ndarray) -> list[np.ndarray | None]:
        raise NotImplementedError("onnxruntime runs forward only")

    def profile_steps(self, step: Callable[[], object], iterations: int, trace: Path | None) -> dict[str, Any]:
        """ONNX Runtime's own profiler (d5pipe.levels.declare.Profiles) on a profiling session of
        this operator's graph and feed: what ``step`` (:meth:`call`) runs, in a session of its own."""
        return ort_profile(self._model, self._options, self._feed, iterations, trace, "forward")


class OrtEngine(Engine):
    """ONNX Runtime's CPU provider with the point's threads."""

    name = "onnxruntime"
    ops = BUILTINS

    def __init__(self, threads: int) -> None:
        import onnxruntime as ort

        self._ort = ort
        self._options = ort.SessionOptions()
        self._options.intra_op_num_threads = threads
        self._options.inter_op_num_threads = 1
        self._options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.told = {"intra_op_threads": threads, "inter_op_threads": 1, "provider": "CPUExecutionProvider",
                     "graph_optimization_level": str(self._options.graph_optimization_level).split(".")[-1],
                     "opset": OPSET}

    def prepare(self, op: NativeOp, inputs: Sequence[np.ndarray], dtype: str) -> OrtPrepared:
        return OrtPrepared(self._ort, self._options, op, inputs, dtype)


ENGINE: Callable[[int], OrtEngine] = OrtEngine

FRAMEWORK = Framework(
    name="onnxruntime", title="ONNX Runtime", packages=("onnxruntime", "onnx"), differentiates=False,
    dtypes=("float64", "float32"), builtins=tuple(BUILTINS),
    sync="InferenceSession.run returns computed NumPy arrays", engine=ENGINE,
    notes=("forward only: no gradient check", "one-node ONNX graphs, opset 23, default graph optimisations",
           "float64 Conv and Gelu have no CPU kernel: skipped"),
)
"""The declaration of ``operators.framework: onnxruntime``."""
