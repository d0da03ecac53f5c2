"""The runtimes of ``level1.runtime``, collected from their declarations. Torch-free.

Each built-in is declared (:class:`~.contract.Runtime`) in the module that implements it
(``torch_runtime``: ``torch`` and ``compile``; ``onnx_runtimes``: ``onnxruntime`` and ``openvino``);
adding one is a module and a line in :data:`RUNTIMES`. The schema's choices and targets (d5pipe.levels.targets), the plan's checks
(d5pipe.levels.level1.validate, .stage) and the point's capabilities are read from them. A user's
runtime (``level1.custom_runtimes``) builds the same :class:`~.contract.Engine`.
"""

from __future__ import annotations

from d5pipe.levels.declare import declared
from d5pipe.levels.level1.runtimes import onnx_runtimes, torch_runtime
from d5pipe.levels.level1.runtimes.contract import Runtime

RUNTIMES: dict[str, Runtime] = declared(torch_runtime.RUNTIME, torch_runtime.COMPILE, onnx_runtimes.ONNXRUNTIME,
                                        onnx_runtimes.OPENVINO)
"""Name -> declaration; the first is the default."""
USER = Runtime("", "")
"""What a user's runtime is taken to be: not PyTorch itself, eager only; whether it reads ONNX
files its engine says (:class:`~.contract.ReadsOnnx`)."""


def declaration(name: str) -> Runtime:
    """The declaration of ``level1.runtime`` ``name`` (a user's: :data:`USER`)."""
    return RUNTIMES.get(name, USER)
