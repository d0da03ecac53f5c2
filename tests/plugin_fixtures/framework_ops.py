"""A user operator given in every level-0 framework (OperatorSpec.frameworks), wrong in one.

Test code, not part of d5pipe: ``operators.custom: {mymm: "framework_ops:MYMM"}`` with this
directory on ``PYTHONPATH`` and ``framework_ops`` allowed by the runner.

* ``MYMM``: ``a @ b`` in PyTorch, JAX and ONNX Runtime (a one-node graph), but in TensorFlow an
  off-by-one bug (the last term of every inner product dropped): its ``correctness`` fails on
  ``tensorflow`` only.
* ``JAX_ONLY``: ``a @ b`` in JAX alone; on any other framework the point is skipped.
"""

from __future__ import annotations

from typing import Any

import torch

from d5pipe.levels.level0.frameworks.ort_ops import node_model
from d5pipe.levels.level0.spec import OperatorSpec


def _matmul(a: Any, b: Any) -> Any:
    return a @ b


def _matmul_off_by_one(a: Any, b: Any) -> Any:
    return a[..., :-1] @ b[..., :-1, :]


MYMM = OperatorSpec(
    name="mymm", make_inputs=None, forward=torch.matmul, reference=None, flops=None, min_bytes=None,
    compare_to="matmul", description="a @ b in four frameworks, wrong in TensorFlow",
    frameworks={"jax": _matmul, "tensorflow": _matmul_off_by_one, "onnxruntime": node_model("MatMul", 2)},
)

JAX_ONLY = OperatorSpec(
    name="jax_only", make_inputs=None, forward=None, reference=None, flops=None, min_bytes=None,
    compare_to="matmul", description="a @ b in JAX alone", frameworks={"jax": _matmul},
)
