"""Datasets generated per sample on demand: ``synthetic_images`` and ``synthetic_tokens``.

Nothing of the dataset's size is ever allocated: a :class:`LazySamples` stands in for each of
``x_train``, ``y_train``, ``x_test``, ``y_test`` and generates the samples an index asks for.
Sample ``i`` and its label are a pure function of ``generator_seed``, ``i`` and the keys that shape
the data, so the same index gives the same bytes on any machine and in any batch composition:

* **Bits.** numpy's counter-based Philox-4x64 bit generator, key ``(generator_seed mod 2**64,
  stream)``, counter ``(0, i, 0, 0)`` -- one independent stream per sample (and per class
  prototype). Only its raw 64-bit words are used (``random_raw``: the bit generator's stream, not a
  distribution method of ``Generator`` that numpy may change), turned into numbers by integer
  arithmetic and exact float32 steps.
* **Labels.** ``splitmix64(splitmix64(seed ^ tag) ^ i) mod n_classes``, vectorised over a batch.
* **Images** (``[C, H, W]``, float32): the class prototype plus ``noise`` times unit-variance
  uniform noise. A prototype is a grid of at most 8 x 8 unit-variance values per channel from its
  class's stream, upsampled (nearest) to H x W: spatially smooth, learnable, 192 numbers per class.
* **Tokens** (``[seq_len]``, int64 ids in ``[0, vocab_size)``): uniform ids, except every 8th
  position, which is drawn from the label's band of the vocabulary (a learnable signal).

The train/test split is by index: the first ``n_train`` indices are the training split, the last
``round(test_fraction * n_samples)`` (at least one each) the test split; no permutation array.
Generating a batch of 64 samples of [3, 224, 224] takes about 0.15 s on one core.
``d5pipe.levels.dataset_key.LAZY_GENERATOR_VERSION`` is part of these datasets' keys: bump it when
the samples of a config change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from d5pipe.core.errors import D5PipeError

_MASK64 = (1 << 64) - 1
_STREAM_SAMPLES = 0x5A4D504C  # Philox key word 1 per purpose: independent streams
_STREAM_PROTOTYPES = 0x50524F54
_LABEL_TAG = 0x4C4142454C535F31
_GRID = 8
"""Prototype grid per channel (at most ``_GRID x _GRID``, upsampled to H x W)."""
_SIGNAL_EVERY = 8
"""Every 8th token comes from the label's band of the vocabulary."""
_UNIT = np.float32(2.0**-24)
_SQRT12 = np.float32(np.sqrt(12.0))

Index = int | slice | torch.Tensor | np.ndarray | Sequence[int]


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, elementwise on uint64 (wrapping arithmetic; also the flips of
    d5pipe.levels.level2.augment)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _raw(seed: int, stream: int, counter: int, words: int) -> np.ndarray:
    """``words`` raw uint64 of Philox stream ``(seed, stream)`` at counter ``(0, counter, 0, 0)``."""
    key = np.array([seed & _MASK64, stream], dtype=np.uint64)
    ctr = np.array([0, counter & _MASK64, 0, 0], dtype=np.uint64)
    out: np.ndarray = np.random.Philox(key=key, counter=ctr).random_raw(words)
    return out


def _unit_uniform(raw: np.ndarray, n: int) -> np.ndarray:
    """``n`` float32 values, uniform with mean 0 and variance 1, two per raw word (24 bits each).

    ``raw`` is ``(..., ceil(n/2))`` uint64; the result ``(..., n)`` float32 (exact on any machine)."""
    pairs = np.empty((*raw.shape, 2), dtype=np.float32)
    pairs[..., 0] = raw >> np.uint64(40)
    low = raw >> np.uint64(8)
    low &= np.uint64(0xFFFFFF)
    pairs[..., 1] = low
    u = pairs.reshape(*raw.shape[:-1], 2 * raw.shape[-1])
    u *= _UNIT
    u -= np.float32(0.5)
    u *= _SQRT12
    return u[..., :n]


@dataclass(frozen=True)
class Generator:
    """What one generated dataset is: every sample and label as a function of its index."""

    name: Literal["synthetic_images", "synthetic_tokens"]
    sample_shape: tuple[int, ...]
    n_samples: int
    n_classes: int
    seed: int
    noise: float = 1.0
    vocab_size: int = 2
    pixels: str = "float32"
    """``uint8``: images rounded to 8-bit levels (d5pipe.levels.builtin_datasets.to_pixels)."""

    @classmethod
    def from_section(cls, conf: Any) -> Generator:
        """The generator of a resolved ``dataset`` section (a DatasetConf)."""
        if conf.name == "synthetic_images":
            shape = tuple(int(d) for d in conf.image_shape)
            return cls("synthetic_images", shape, int(conf.n_samples), int(conf.n_classes),
                       int(conf.generator_seed), noise=float(conf.noise), pixels=str(conf.pixels))
        if conf.name == "synthetic_tokens":
            return cls("synthetic_tokens", (int(conf.seq_len),), int(conf.n_samples), int(conf.n_classes),
                       int(conf.generator_seed), vocab_size=int(conf.vocab_size))
        raise D5PipeError(f"dataset.name: {conf.name!r} is not a generated dataset")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.name == "synthetic_images" else torch.int64

    def labels(self, idx: np.ndarray) -> np.ndarray:
        """int64 labels in ``[0, n_classes)`` of the global indices ``idx``."""
        base = splitmix64(np.array([(self.seed ^ _LABEL_TAG) & _MASK64], dtype=np.uint64))
        mixed = splitmix64(idx.astype(np.uint64) ^ base)
        out: np.ndarray = (mixed % np.uint64(self.n_classes)).astype(np.int64)
        return out

    def samples(self, idx: np.ndarray) -> np.ndarray:
        """The samples of the global indices ``idx``: ``(len(idx), *sample_shape)``."""
        return self._images(idx) if self.name == "synthetic_images" else self._tokens(idx)

    def _rows(self, idx: np.ndarray, words: int) -> np.ndarray:
        raw = np.empty((len(idx), words), dtype=np.uint64)
        for row, i in enumerate(idx.tolist()):
            raw[row] = _raw(self.seed, _STREAM_SAMPLES, int(i), words)
        return raw

    def prototypes(self, classes: np.ndarray) -> np.ndarray:
        """The coarse prototypes ``(len(classes), C, gh, gw)`` of ``classes`` (unit variance)."""
        c, h, w = self.sample_shape
        gh, gw = min(h, _GRID), min(w, _GRID)
        n = c * gh * gw
        raw = np.stack([_raw(self.seed, _STREAM_PROTOTYPES, int(k), (n + 1) // 2) for k in classes.tolist()])
        return _unit_uniform(raw, n).reshape(len(classes), c, gh, gw)

    def _images(self, idx: np.ndarray) -> np.ndarray:
        c, h, w = self.sample_shape
        n = c * h * w
        x = _unit_uniform(self._rows(idx, (n + 1) // 2), n).reshape(len(idx), c, h, w)
        x *= np.float32(self.noise)
        classes, inverse = np.unique(self.labels(idx), return_inverse=True)
        coarse = self.prototypes(classes)
        rows = (np.arange(h) * coarse.shape[2]) // h
        cols = (np.arange(w) * coarse.shape[3]) // w
        for k in range(len(classes)):  # nearest upsampling, added in place (no batch-sized temporary)
            members = np.flatnonzero(inverse == k)
            x[members] += coarse[k][:, rows[:, None], cols[None, :]]
        if self.pixels == "uint8":
            from d5pipe.levels.builtin_datasets import to_pixels

            return to_pixels(x)
        return x

    def _tokens(self, idx: np.ndarray) -> np.ndarray:
        (seq,) = self.sample_shape
        raw = self._rows(idx, seq)
        vocab = np.uint64(self.vocab_size)
        ids = raw % vocab
        labels = self.labels(idx).astype(np.uint64)
        band = np.uint64(max(1, self.vocab_size // self.n_classes))
        start = (labels * vocab) // np.uint64(self.n_classes)
        signal = ids[:, ::_SIGNAL_EVERY]
        ids[:, ::_SIGNAL_EVERY] = (start[:, None] + signal % band) % vocab
        out: np.ndarray = ids.astype(np.int64)
        return out


def split_sizes(n_samples: int, test_fraction: float) -> tuple[int, int]:
    """``(n_train, n_test)``: the last ``round(test_fraction * n)`` indices (1 .. n-1) are test."""
    n_test = min(max(int(round(test_fraction * n_samples)), 1), n_samples - 1)
    return n_samples - n_test, n_test


class LazySamples:
    """The samples (``part="x"``) or labels (``"y"``) of indices ``[start, start + length)`` of a
    :class:`Generator`, indexable like a tensor: ``s[i]``, ``s[a:b]``, ``s[index_tensor]`` give a
    real ``torch.Tensor`` generated on demand. Nothing is cached; it pickles small."""

    __slots__ = ("generator", "part", "start", "length")

    def __init__(self, generator: Generator, part: Literal["x", "y"], start: int, length: int) -> None:
        self.generator, self.part, self.start, self.length = generator, part, int(start), int(length)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"LazySamples({self.generator.name}, {self.part}, shape={tuple(self.shape)}, dtype={self.dtype})"

    @property
    def shape(self) -> torch.Size:
        """``(n, *sample_shape)`` for samples, ``(n,)`` for labels."""
        tail = self.generator.sample_shape if self.part == "x" else ()
        return torch.Size((self.length, *tail))

    @property
    def dtype(self) -> torch.dtype:
        return self.generator.dtype if self.part == "x" else torch.int64

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def per_sample(self) -> bool:
        """Whether its source reads one sample at a time from disk or a user's Dataset (a stored
        split, d5pipe.levels.stored_samples / user_samples): the loop reads it through a DataLoader."""
        return bool(getattr(self.generator, "per_sample", False))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """What materialising all of it would take."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None) -> Any:
        """Like ``Tensor.size`` (so ``TensorDataset`` accepts it)."""
        return self.shape if dim is None else self.shape[dim]

    def indices(self, key: Index) -> tuple[np.ndarray, bool]:
        """``key`` as local indices in ``[0, len)`` (int64) and whether it was a single index."""
        n = self.length
        if isinstance(key, slice):
            return np.arange(*key.indices(n), dtype=np.int64), False
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for {n} samples")
            return np.array([i % n], dtype=np.int64), True
        if isinstance(key, torch.Tensor):
            if key.dim() == 0 and not key.dtype.is_floating_point and key.dtype != torch.bool:
                return self.indices(int(key.item()))
            arr = key.detach().cpu().numpy()
        elif isinstance(key, (np.ndarray, list, tuple)):
            arr = np.asarray(key)
            if arr.size == 0:
                arr = arr.astype(np.int64)
        else:
            raise TypeError(f"LazySamples index must be an int, a slice or a 1-D index array, not "
                            f"{type(key).__name__}")
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
            raise TypeError(f"LazySamples index must be 1-D integer or boolean, got {arr.dtype} {arr.shape}")
        if arr.dtype == np.bool_:
            if arr.size != n:
                raise IndexError(f"boolean index of length {arr.size} for {n} samples")
            return np.flatnonzero(arr).astype(np.int64), False
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise IndexError(f"index {int(arr.max() if arr.max() >= n else arr.min())} is out of bounds "
                             f"for {n} samples")
        return np.where(arr < 0, arr + n, arr), False

    def __getitem__(self, key: Index) -> torch.Tensor:
        local, single = self.indices(key)
        glob = local + self.start
        gen = self.generator
        if self.part == "y":
            data = gen.labels(glob)
        elif len(glob):
            data = gen.samples(glob)
        else:
            data = np.empty((0, *gen.sample_shape), dtype=np.float32 if gen.dtype == torch.float32 else np.int64)
        out = torch.from_numpy(np.ascontiguousarray(data))
        return out[0] if single else out


def lazy_splits(generator: Generator, test_fraction: float) -> tuple[LazySamples, LazySamples, LazySamples,
                                                                       LazySamples]:
    """``(x_train, y_train, x_test, y_test)`` of ``generator``, split by index."""
    n_train, n_test = split_sizes(generator.n_samples, test_fraction)
    return (LazySamples(generator, "x", 0, n_train), LazySamples(generator, "y", 0, n_train),
            LazySamples(generator, "x", n_train, n_test), LazySamples(generator, "y", n_train, n_test))
