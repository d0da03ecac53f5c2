"""Level 2's input pipeline around the training loop: the loader a point trains from, the seed its
feeding variants share, and the measurements of the loader alone and of the model without it.

* :func:`training_loader`: the training split's batches as ``train.*`` says (sampler, workers,
  DataLoader settings, augmentation; d5pipe.levels.level2.train_loop.make_loader);
* :func:`training_seed`: the seed of a training run, shared by variants that differ only in how they
  are fed (:data:`PIPELINE_KEYS`), so they must end with the same weights;
* ``train.measure_loader``: :func:`loader_alone` (one epoch of the loader without the model) and
  :func:`in_memory_steps` (steps of a copy of the model on batches held in memory), summarised by
  :func:`measure_loader`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict

import torch
from torch import nn

from d5pipe.core.outcome import Metric
from d5pipe.core.seeds import derive_seed
from d5pipe.levels.contract import PointContext
from d5pipe.levels.datasets import Dataset
from d5pipe.levels.device import synchronize
from d5pipe.levels.level2.metrics import median_metric
from d5pipe.levels.level2.sampling import IndexBatches, make_sampler
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level2.train_loop import Batches, LoaderOptions, StepLog, make_loader, train_epoch
from d5pipe.levels.optim import make_optimizer
from d5pipe.levels.schema import DatasetConf
from d5pipe.levels.variant_seed import VariantKeys, variant_seed


def training_loader(conf: TrainConf, data: Dataset, seed: int, device: torch.device,
                    workers: int | None = None) -> Batches:
    """The training split's batches for ``conf`` (``workers``: instead of ``train.num_workers``)."""
    options = LoaderOptions(conf.pin_memory, conf.prefetch_factor, conf.persistent_workers)
    return make_loader(data.x_train, data.y_train, conf.batch_size, seed,
                       conf.num_workers if workers is None else workers, device, make_batches(conf, data, seed),
                       options, conf.augment, derive_seed(seed, "augment"))


def make_batches(conf: TrainConf, data: Dataset, seed: int) -> IndexBatches | None:
    """The index batches of a user's sampler (``train.sampler``); None for the built-in shuffle."""
    if conf.sampler == "shuffle":
        return None
    return IndexBatches(make_sampler(asdict(conf), len(data.y_train), train_labels(data), seed), conf.batch_size)


def train_labels(data: Dataset) -> torch.Tensor:
    """The training split's labels, whole (generated ones: only the labels, not the samples)."""
    return data.y_train[torch.arange(len(data.y_train))]


IN_MEMORY_STEPS = 20
"""``train.measure_loader``: steps timed on batches held in memory (fewer when an epoch has fewer)."""


def loader_alone(data: Dataset, conf: TrainConf, seed: int, device: torch.device) -> list[float]:
    """One epoch of the training loader without the model (the same batches as the first epoch):
    each batch's samples over the time from asking for it to having it on the device."""
    loader = training_loader(conf, data, seed, device)
    rates: list[float] = []
    last = time.perf_counter_ns()
    for _, yb in loader:
        synchronize(device)
        now = time.perf_counter_ns()
        rates.append(len(yb) / max((now - last) * 1e-9, 1e-12))
        last = now
    return rates


def in_memory_steps(model: nn.Module, data: Dataset, conf: TrainConf, seed: int, device: torch.device
                     ) -> tuple[list[float], int]:
    """Step times of a copy of ``model`` (and a fresh optimizer) on the first batches of an epoch,
    held on the device before the first step: the training step with no loader at all."""
    loader = training_loader(conf, data, seed, device, workers=0)
    held = [b for b, _ in zip(loader, range(IN_MEMORY_STEPS), strict=False)]
    twin = copy.deepcopy(model)
    stats = train_epoch(twin, held, make_optimizer(asdict(conf), twin.parameters()), device, 0, StepLog(None),
                        micro_batches=conf.micro_batches)
    return stats.step_times_s, len(held[0][1]) if held else 0


def measure_loader(model: nn.Module, data: Dataset, conf: TrainConf, seed: int, device: torch.device
                   ) -> tuple[list[Metric], dict[str, list[float]]]:
    """:func:`loader_alone` and :func:`in_memory_steps` as metrics (``loader_samples_per_s``,
    ``step_time_in_memory``, ``model_samples_per_s``; d5pipe.levels.level2.metrics) and their samples."""
    rates = loader_alone(data, conf, seed, device)
    in_memory, batch = in_memory_steps(model, data, conf, seed, device)
    metrics = [median_metric("loader_samples_per_s", rates)] if rates else []
    samples = {"loader_batch_samples_per_s": rates} if rates else {}
    if in_memory and batch:
        samples.update(in_memory_step_s=in_memory, in_memory_samples_per_s=[batch / s for s in in_memory])
        metrics += [median_metric("step_time_in_memory", in_memory),
                    median_metric("model_samples_per_s", samples["in_memory_samples_per_s"])]
    return metrics, samples


PIPELINE_KEYS: VariantKeys = {
    "train": (TrainConf, ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "measure_loader",
                          "micro_batches", "framework")),
    "dataset": (DatasetConf, ("storage",)),
}
"""Keys that change how a training run gets its batches or splits them, or which framework takes
its steps, not what it computes: variants that differ only in them train from the same seed
(:func:`training_seed`)."""


def training_seed(ctx: PointContext) -> tuple[int, str]:
    """The seed of a training run (initial weights, batch order, dropout) and how it was found:
    shared by the variants that differ only in :data:`PIPELINE_KEYS` (storage x workers x
    micro-batches, in one repetition), which must then end with the same weights
    (d5pipe.levels.variant_seed)."""
    return variant_seed(ctx, PIPELINE_KEYS, "level2-training")
