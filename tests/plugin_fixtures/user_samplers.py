"""User samplers for tests/test_sampler_checks.py: one correct, one biased towards class 0, one that
draws with replacement, one whose order ignores its generator."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import RandomSampler, Sampler


def correct(n: int, generator: torch.Generator) -> Sampler[int]:
    """A seeded permutation per epoch (takes only what it needs of n, labels, generator)."""
    return RandomSampler(range(n), generator=generator)


class ClassZeroTwice(Sampler[int]):
    """Every sample once, and every sample of class 0 a second time: biased towards class 0."""

    def __init__(self, n: int, labels: torch.Tensor, generator: torch.Generator) -> None:
        self.labels, self.generator = labels, generator

    def __len__(self) -> int:
        return len(self.labels) + int((self.labels == 0).sum())

    def __iter__(self) -> Iterator[int]:
        extra = torch.nonzero(self.labels == 0).reshape(-1)
        order = torch.cat([torch.arange(len(self.labels)), extra])
        yield from order[torch.randperm(len(order), generator=self.generator)].tolist()


def with_replacement(n: int, generator: torch.Generator) -> Sampler[int]:
    return RandomSampler(range(n), replacement=True, num_samples=n, generator=generator)


class Unseeded(Sampler[int]):
    """A permutation from its own clock-seeded generator: not reproducible from the seed."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator()
        gen.seed()
        yield from torch.randperm(self.n, generator=gen).tolist()
