"""A user dataset: scikit-learn's digits as a pair of ``torch.utils.data.Dataset``.

d5pipe calls ``digits_pair(**arguments)`` once (in its ``prepare_data`` job), stacks the two
datasets with ``torch.utils.data.default_collate`` and stores the arrays like a built-in
dataset; the data decide the input shape ((1, 8, 8)) and the number of classes (10).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class Digits(Dataset[tuple[torch.Tensor, int]]):
    """Images in [0, 1] as (1, 8, 8) float tensors with their labels."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x = torch.from_numpy((x / 16.0).reshape(-1, 1, 8, 8).astype(np.float32))
        self.y = [int(v) for v in y]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x[i], self.y[i]


def digits_pair(test_fraction: float = 0.25, seed: int = 0) -> tuple[Digits, Digits]:
    """A seeded random (not stratified) train/test split of the digits."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    order = np.random.default_rng(seed).permutation(len(bunch.target))
    n_test = int(round(test_fraction * len(order)))
    test, train = order[:n_test], order[n_test:]
    return Digits(bunch.data[train], bunch.target[train]), Digits(bunch.data[test], bunch.target[test])
