"""The built-in frameworks of ``train.framework``, as registered targets (d5pipe.levels.targets):
each is called with the point's ``model`` and the ``dtype`` to compute in, as a user's is."""

from __future__ import annotations

from typing import Any

from torch import nn

from d5pipe.levels.level2.frameworks.torch_framework import TorchFramework


def torch(model: nn.Module, dtype: str = "float32") -> TorchFramework:
    return TorchFramework(model, dtype=dtype)


def compile(model: nn.Module, dtype: str = "float32") -> TorchFramework:  # noqa: A001 - the selector's name
    return TorchFramework(model, compile=True, dtype=dtype)


def jax(model: nn.Module, dtype: str = "float32") -> Any:
    from d5pipe.levels.level2.frameworks.jax_framework import JaxFramework

    return JaxFramework(dtype)


def tensorflow(model: nn.Module, dtype: str = "float32") -> Any:
    from d5pipe.levels.level2.frameworks.tf_framework import TensorFlowFramework

    return TensorFlowFramework(dtype)
