"""The order of the training samples: the built-in sampler, a user's, and their cut into batches.

``train.sampler`` selects a sampler (d5pipe.levels.targets, slot ``sampler``): the built-in
``shuffle`` or a user target from ``train.custom_samplers``. Every sampler is built by one call,
``target(n=..., labels=..., generator=...)``: ``n`` training samples, their int64 ``labels`` and a
CPU ``torch.Generator`` seeded from the point seed (a factory gets those of the three it takes);
it returns an iterable of sample indices, one
epoch per ``iter()`` (a ``torch.utils.data.Sampler``). :class:`IndexBatches` cuts each epoch into
index tensors of ``batch_size`` (the last may be short), which the loaders of
d5pipe.levels.level2.train_loop gather like the built-in batches.

The built-in ``shuffle`` is trained through d5pipe.levels.level2.train_loop.ShuffledBatches (the same
permutation per epoch as :func:`shuffle` gives, without a Python list of indices); its target here
lets the sampler checks (d5pipe.levels.level2.sampler_check) run on it like on a user's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

import torch
from torch.utils.data import RandomSampler, Sampler

from d5pipe.levels.instantiate import build
from d5pipe.levels.targets import target_of
from d5pipe.measure.determinism import loader_generator


def shuffle(n: int, labels: torch.Tensor, generator: torch.Generator) -> Sampler[int]:
    """The built-in ``shuffle``: one seeded permutation of ``range(n)`` per epoch."""
    return RandomSampler(range(n), generator=generator)


def make_sampler(train: Mapping[str, Any], n: int, labels: torch.Tensor, seed: int) -> Iterable[int]:
    """The sampler ``train.sampler`` selects, built with a generator seeded with ``seed``."""
    key, target = target_of(train, "sampler")
    sampler = build(target, key, offered={"n": n, "labels": labels, "generator": loader_generator(seed)})
    if not isinstance(sampler, Iterable):
        raise TypeError(f"{key}: the sampler returned {type(sampler).__name__}, not an iterable of indices")
    return sampler


class IndexBatches(Sampler[torch.Tensor]):
    """Each epoch of ``sampler`` as int64 index tensors of ``batch_size`` (the last may be short)."""

    def __init__(self, sampler: Iterable[int], batch_size: int) -> None:
        self.sampler, self.batch_size = sampler, batch_size

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError("the sampler has no length")
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[torch.Tensor]:
        indices = iter(self.sampler)
        while batch := [int(i) for i in itertools.islice(indices, self.batch_size)]:
            yield torch.tensor(batch, dtype=torch.int64)
