"""A user model: an MLP written from scratch, declaring the built-in ``mlp`` as its reference.

d5pipe builds it as ``TinyMLP(input_shape=..., n_classes=..., **arguments)``. Its parameters have
the built-in's names and shapes (``net.1``, ``net.3``), so level 1's ``output_check`` can give it
the reference's weights with ``load_state_dict``; a model with other names would define
``load_reference(self, reference)`` instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Dense(nn.Module):
    """``x @ W^T + b`` with PyTorch's default initialisation."""

    def __init__(self, fan_in: int, fan_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fan_out, fan_in))
        self.bias = nn.Parameter(torch.empty(fan_out))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t() + self.bias


class TinyMLP(nn.Module):
    """Flatten, one hidden layer with ReLU, a linear head."""

    def __init__(self, input_shape: tuple[int, ...], n_classes: int, hidden: int = 64) -> None:
        super().__init__()
        fan_in = math.prod(input_shape)
        self.net = nn.Sequential(nn.Flatten(), Dense(fan_in, hidden), nn.ReLU(), Dense(hidden, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out
