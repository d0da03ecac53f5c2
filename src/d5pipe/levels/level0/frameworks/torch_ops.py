"""PyTorch, level 0's own framework and the default of ``operators.framework``: its declaration.
Its operators are d5pipe.levels.level0.operators and its point is d5pipe.levels.level0.point
(layouts, ``torch.compile``, CUDA, backward timings); nothing here imports torch."""

from __future__ import annotations

from d5pipe.levels.level0.frameworks.contract import Framework

FRAMEWORK = Framework(
    name="torch", title="PyTorch", packages=("torch",), differentiates=True,
    dtypes=("float64", "float32", "bfloat16", "float16"),
    sync="torch.cuda.synchronize / CUDA events on CUDA; CPU calls return when computed",
    gradient="torch.autograd.grad", engine=None,
    impls=("eager", "compile", "channels_last"), layouts=("contiguous", "channels_last", "transposed"),
    devices=("cpu", "cuda"),
)
"""The declaration; its built-in operators are every one level 0 has (the schema's list)."""
