"""A user's dataset as torch Datasets (tests/test_stored_samples.py): scikit-learn's digits, one
item read (and counted) at a time; and a factory that returns arrays instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

READS = {"items": 0}
"""Items read by this process (a lazy dataset is read per sample, never stacked at load)."""


class Digits(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        READS["items"] += 1
        return torch.from_numpy(self.x[i]), int(self.y[i])


def digits() -> tuple[Digits, Digits]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    return Digits(x[:1400], y[:1400]), Digits(x[1400:], y[1400:])


def arrays() -> Any:
    train, test = digits()
    return train.x, train.y, test.x, test.y
