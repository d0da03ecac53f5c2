"""The level-2 training loop: seeded batches, one epoch of timed steps, evaluation, the step log.

The loop is built so that d5pipe's step costs what a bare PyTorch loop's step costs (see
``benchmarks/bench_train_overhead.py``): inside an epoch nothing waits for the device and no
Python bookkeeping beyond a few list appends runs per step.

* Step time: on the CPU, where eager ops run synchronously, ``perf_counter_ns`` before
  ``zero_grad`` and after ``optimizer.step()``; on CUDA a pair of timing events recorded on the
  current stream around the same span, read after the epoch's one synchronisation.
* Step losses stay on the device as detached tensors and are reduced once per epoch
  (``train_loss`` = sample-weighted mean of the step losses). Training accuracy is not counted
  in the loop (an argmax per step costs about 1% of a small model's step): level 2 evaluates the
  training split after each epoch, as it does the test split.
* Step events go to the JSONL log after the epoch, when the loss values are on the host.
* A generated dataset (d5pipe.levels.lazy_samples: ``x``/``y`` are ``LazySamples``) is never moved
  to the device whole: each batch is generated from its index tensor on the CPU (in the
  DataLoader's workers with ``num_workers`` > 0) and copied to the device; the batches are the same
  indices as for a tensor dataset.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler
from torch.utils.data import Dataset as TorchDataset

from d5pipe.core.seeds import derive_seed
from d5pipe.levels.datasets import Samples
from d5pipe.levels.device import synchronize
from d5pipe.levels.lazy_samples import LazySamples
from d5pipe.levels.level2.augment import Augmented, EpochTagged
from d5pipe.levels.micro_batches import backward
from d5pipe.measure.determinism import loader_generator, seed_worker
from d5pipe.measure.energy import Span

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]


class IndexSampler(Protocol):
    """Index tensors, one per batch of an epoch (:class:`ShuffledBatches`, a user sampler's
    d5pipe.levels.level2.sampling.IndexBatches)."""

    def __iter__(self) -> Iterator[torch.Tensor]: ...

    def __len__(self) -> int: ...


class ShuffledBatches(Sampler[torch.Tensor]):
    """Index tensors of one seeded permutation per epoch, cut into batches (last one may be short)."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator) -> None:
        self.n, self.batch_size, self.generator = n, batch_size, generator

    def __len__(self) -> int:
        return (self.n + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[torch.Tensor]:
        # lazy: DataLoader may call iter() and drop the result; only consumed epochs draw
        perm = torch.randperm(self.n, generator=self.generator)
        yield from torch.split(perm, self.batch_size)


class BatchByIndices(TorchDataset[tuple[torch.Tensor, torch.Tensor]]):
    """A Dataset whose item for a tensor ``idx`` of sample indices is the batch ``(x[idx], y[idx])``:
    a DataLoader with ``batch_size=None`` and an index-batch sampler has its workers gather (or
    generate, d5pipe.levels.lazy_samples) whole batches. ``len()`` is the number of samples the
    indices address, not of batches (the DataLoader takes that from its sampler)."""

    def __init__(self, x: Samples, y: Samples) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]


class GatheredBatches:
    """The batches ``(x[idx], y[idx])`` of one epoch, one for each index batch of ``sampler``,
    gathered without DataLoader machinery (a generated dataset, d5pipe.levels.lazy_samples,
    generates them on the CPU). ``len()`` is the number of batches in an epoch (the sampler's)."""

    def __init__(self, x: Samples, y: Samples, sampler: IndexSampler) -> None:
        self.x, self.y, self.sampler = x, y, sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = self.x, self.y
        # the sampler's indices are CPU tensors: moved to a split held on another device
        to = x.device if isinstance(x, torch.Tensor) and x.device.type != "cpu" else None
        for idx in self.sampler:
            if to is not None:
                idx = idx.to(to, non_blocking=True)
            yield x[idx], y[idx]


class OnDevice:
    """The batches of ``loader`` copied to ``device`` (asynchronously where the device allows)."""

    def __init__(self, loader: Batches, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for xb, yb in self.loader:
            yield xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)


@dataclass(frozen=True)
class LoaderOptions:
    """The DataLoader's settings with workers (``train.pin_memory``, ``prefetch_factor``,
    ``persistent_workers``); ``pin_memory`` None: pinned when the device is CUDA."""

    pin_memory: bool | None = None
    prefetch_factor: int = 2
    persistent_workers: bool = False

    def pinned(self, device: torch.device) -> bool:
        """The DataLoader's ``pin_memory`` for batches bound for ``device``."""
        return device.type == "cuda" if self.pin_memory is None else self.pin_memory


def make_loader(
    x: Samples, y: Samples, batch_size: int, seed: int, num_workers: int = 0,
    device: torch.device | None = None, batches: IndexSampler | None = None,
    options: LoaderOptions | None = None, augment: str = "none", augment_seed: int = 0,
) -> Batches:
    """Shuffled batches on ``device`` (default CPU) from a sampler seeded with ``seed``, or the index
    batches of ``batches`` (a user's sampler, d5pipe.levels.level2.sampling.IndexBatches).

    The batches are the same for any ``num_workers``. Without workers the whole split is moved to
    the device once and batches are gathered there (the DataLoader's per-batch cost is measurable
    on small models); with workers a DataLoader (seeded generator, :func:`seed_worker`,
    ``options``) gathers them on the CPU and each batch is copied to the device. ``augment``
    (d5pipe.levels.level2.augment, seeded by ``augment_seed``) works on the CPU in whatever fetches
    the batch.
    """
    device = device or torch.device("cpu")
    sampler: IndexSampler = batches if batches is not None else ShuffledBatches(len(y), batch_size,
                                                                                loader_generator(seed))
    if augment != "none":
        n = len(y)
        sampler = EpochTagged(sampler, n)
        x, y = Augmented(x, n, augment_seed), Augmented(y, n, None)  # type: ignore[assignment]
    generated = isinstance(x, (LazySamples, Augmented)) or isinstance(y, (LazySamples, Augmented))
    opts = options or LoaderOptions()
    per_sample = bool(getattr(x, "per_sample", False))  # a stored split or a user's Dataset (augmented or not)
    if num_workers <= 0 and not per_sample:
        if generated:  # never the whole split on the device: each batch generated, then copied
            batches_ = GatheredBatches(x, y, sampler)
            return batches_ if device.type == "cpu" else OnDevice(batches_, device)
        assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        return GatheredBatches(x.to(device), y.to(device), sampler)
    # worker base seeds come from their own generator, so the shuffle does not depend on workers;
    # per sample, each batch is read one sample at a time (in this process with 0 workers) and collated
    workers = num_workers > 0
    batching: dict[str, Any] = {"batch_sampler": sampler} if per_sample else {"batch_size": None, "sampler": sampler}
    loader: DataLoader[Any] = DataLoader(
        PerSample(x, y) if per_sample else BatchByIndices(x, y),  # each worker gathers (generates) its batches
        **batching,
        num_workers=num_workers,
        worker_init_fn=seed_worker if workers else None,
        generator=loader_generator(derive_seed(seed, "dataloader-workers")),
        pin_memory=opts.pinned(device),
        prefetch_factor=opts.prefetch_factor if workers else None,
        persistent_workers=opts.persistent_workers and workers,
    )
    return OnDevice(loader, device)


class PerSample(TorchDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sample ``i`` and its label, one ``__getitem__`` a sample (a stored split's samples are read
    from disk and decoded here: d5pipe.levels.stored_samples)."""

    def __init__(self, x: Samples, y: Samples) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        source = getattr(self.x, "generator", None)
        if source is not None and source is getattr(self.y, "generator", None) and hasattr(source, "item"):
            return source.item(int(i) + self.x.start)  # type: ignore[union-attr]  # a user's item, read once
        return self.x[int(i)], self.y[int(i)]


class StepLog:
    """Append-only JSONL event log (one JSON object per line), truncated when opened."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def __enter__(self) -> StepLog:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8")
        return self

    def write(self, event: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(event, sort_keys=True) + "\n")

    def write_steps(
        self, epoch: int, first_step: int, lr: float, losses: list[float], batches: list[int],
        step_times_s: list[float], every: int = 1,
    ) -> None:
        """One ``{"event": "step", ...}`` line per ``every``-th step (global step numbering).

        Formatted directly (keys sorted, as :meth:`write` does): ``json.dumps`` per line costs
        about 1% of a small model's step.
        """
        if self._fh is None:
            return
        lr_s = _json_number(lr)
        lines = [
            f'{{"batch": {batches[i]}, "epoch": {epoch}, "event": "step", '
            f'"loss": {_json_number(losses[i])}, "lr": {lr_s}, "step": {first_step + i}, '
            f'"step_time_s": {_json_number(step_times_s[i])}}}\n'
            for i in range(len(losses)) if (first_step + i) % every == 0
        ]
        self._fh.write("".join(lines))

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _json_number(value: float) -> str:
    """``value`` as :func:`json.dumps` writes it (``NaN``/``Infinity`` included)."""
    return repr(value) if math.isfinite(value) else json.dumps(value)


class StepClock:
    """Start/end marks per step, read as seconds once the epoch is over (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        # the stream the model's kernels go to: the current stream of *its* device
        self.stream = torch.cuda.current_stream(device) if self.cuda else None
        self.marks: list[Any] = []
        self.host: list[int] = []
        """``perf_counter_ns`` at every mark (on the CPU these are the marks themselves)."""

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
            self.marks.append(event)
            self.host.append(time.perf_counter_ns())
        else:
            now = time.perf_counter_ns()
            self.marks.append(now)
            self.host.append(now)

    def seconds(self) -> list[float]:
        """Per-step durations; call after the device has been synchronised."""
        m = self.marks
        if self.cuda:
            return [float(m[i].elapsed_time(m[i + 1])) * 1e-3 for i in range(0, len(m), 2)]
        return [(m[i + 1] - m[i]) * 1e-9 for i in range(0, len(m), 2)]

    def waits(self, start_ns: int) -> list[float]:
        """Per step, the host's wait for its batch: from the end of the previous step (the first:
        from ``start_ns``, before the loader was asked) to the batch being in hand, in seconds."""
        h = self.host
        ends = [start_ns, *h[1::2]]
        return [(h[i] - ends[i // 2]) * 1e-9 for i in range(0, len(h), 2)]


@dataclass
class EpochStats:
    train_loss: float
    train_time_s: float
    samples: int
    step_times_s: list[float] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)
    """Every step's training loss (read once, after the epoch)."""
    wait_times_s: list[float] = field(default_factory=list)
    """Per step, the wait for its batch (:meth:`StepClock.waits`); the first includes starting
    the loader's iterator (its workers, when they are not persistent)."""

    @property
    def stall_fraction(self) -> float:
        """The share of the epoch's step time spent waiting for batches: waits / (waits + steps)."""
        waits = sum(self.wait_times_s)
        total = waits + sum(self.step_times_s)
        return waits / total if total > 0 else math.nan


def train_epoch(
    model: nn.Module,
    loader: Batches,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epoch: int,
    log: StepLog,
    first_step: int = 0,
    log_every: int = 1,
    micro_batches: int = 1,
    span: Span | None = None,
) -> EpochStats:
    """One pass over ``loader`` (batches already on ``device``); steps are timed and logged. A
    step's forward and backward run in ``micro_batches`` parts (d5pipe.levels.micro_batches).

    ``train_time_s`` is the wall time of the pass up to the device being idle; the step log is
    written after that. ``span`` (d5pipe.measure.energy) reads its energy around the same pass.
    """
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    clock = StepClock(device)
    mark = clock.mark
    losses: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    lr = float(optimizer.param_groups[0]["lr"])
    synchronize(device)
    if span is not None:
        span.begin()
    t_epoch = time.perf_counter()
    t_start = time.perf_counter_ns()
    for xb, yb in loader:
        mark()
        optimizer.zero_grad(set_to_none=True)
        loss = backward(model, loss_fn, xb, yb, micro_batches)
        optimizer.step()
        mark()
        losses.append(loss)
        labels.append(yb)  # sized after the epoch
    synchronize(device)
    train_time = time.perf_counter() - t_epoch
    if span is not None:
        span.end()
    if not losses:
        return EpochStats(math.nan, train_time, 0, [])
    batches = [len(t) for t in labels]
    seen = sum(batches)
    loss_values: list[float] = torch.stack(losses).tolist()
    step_times = clock.seconds()
    log.write_steps(epoch, first_step, lr, loss_values, batches, step_times, log_every)
    loss_mean = sum(v * n for v, n in zip(loss_values, batches, strict=True)) / seen
    return EpochStats(loss_mean, train_time, seen, step_times, loss_values, clock.waits(t_start))


@torch.no_grad()
def evaluate(
    model: nn.Module, x: Samples, y: Samples, batch_size: int, device: torch.device
) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on ``x, y`` in eval mode (slices: a generated dataset is
    generated batch by batch)."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, len(y), batch_size):
        xb = x[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        out = model(xb)
        loss_sum += nn.functional.cross_entropy(out, yb, reduction="sum").double()
        correct += (out.argmax(dim=1) == yb).sum()
    return float(loss_sum.item()) / len(y), int(correct.item()) / len(y)
