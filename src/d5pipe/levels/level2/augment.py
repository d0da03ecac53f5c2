"""Per-sample augmentation in the input pipeline (``train.augment``), the same in every loader.

``flip``: each drawn sample is mirrored left-right (its last axis) with probability 1/2. Whether it
is depends only on the training seed, the epoch and the sample's index -- a splitmix64 hash, not a
random stream -- so the training process, any number of DataLoader workers and every
``dataset.storage`` flip the same samples, and variants that differ only in how they are fed still
compute the same. The sampler's index batches are tagged with their epoch (:class:`EpochTagged`:
``index + epoch * n``), and :class:`Augmented` undoes the tag, reads the sample and flips it where
the hash says so, inside whatever fetches the batch (a worker, for ``num_workers`` > 0): the
augmentation is part of the loader's work, as in real training.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from d5pipe.levels.lazy_samples import splitmix64


def flip_mask(seed: int, tags: np.ndarray) -> np.ndarray:
    """Which drawn samples (``index + epoch * n`` tags) are mirrored: half of them, by hash."""
    with np.errstate(over="ignore"):
        base = splitmix64(np.array([seed & ((1 << 64) - 1)], dtype=np.uint64))
        return (splitmix64(tags.astype(np.uint64) ^ base) & np.uint64(1)).astype(bool)


class EpochTagged:
    """The index batches of ``sampler`` as ``index + epoch * n`` (epochs counted from 0 by ``iter``)."""

    def __init__(self, sampler: Any, n: int) -> None:
        self.sampler, self.n, self.epoch = sampler, n, -1

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[torch.Tensor]:
        self.epoch += 1
        offset = self.epoch * self.n
        for idx in self.sampler:
            yield torch.as_tensor(idx, dtype=torch.int64) + offset


class Augmented:
    """Samples indexed by epoch tags: ``x[tag % n]``, mirrored where :func:`flip_mask` says so (a
    single tag gives one sample). Labels are ``Augmented`` with ``seed`` None: only the tag undone."""

    def __init__(self, inner: Any, n: int, seed: int | None) -> None:
        self.inner, self.n, self.seed = inner, n, seed
        self.per_sample = bool(getattr(inner, "per_sample", False))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: Any) -> torch.Tensor:
        tags = torch.as_tensor(key, dtype=torch.int64)
        single = tags.dim() == 0
        flat = tags.reshape(-1)
        out = self.inner[flat % self.n]
        if self.seed is not None:
            mask = torch.from_numpy(flip_mask(self.seed, flat.numpy()))
            if bool(mask.any()):
                out = out.clone()
                out[mask] = out[mask].flip(-1)
        return out[0] if single else out
