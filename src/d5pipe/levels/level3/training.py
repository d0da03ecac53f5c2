"""Data-parallel training pieces shared by the rank workers and the serial reference.

Equivalence by construction: every step draws one *global* batch of indices from a permutation
seeded by the point's data seed (identical on every rank); rank ``r`` of ``n`` trains on slice
``r`` of it (``Strategy.share``; a parameter server's servers draw none). With the mean loss per
rank and gradients averaged over ranks, one step equals one
single-process step on the whole global batch, so an ``n``-rank run must end with the parameters of
the 1-process run on the same global batches (up to floating-point summation order). That serial
run is :func:`train_serial`; ``run_point`` compares the two (``matches_serial``).

Each rank builds its model with its own rank seed; the engine then broadcasts rank 0's parameters,
so parameter identity across ranks is a real check of that broadcast and of the gradient averaging.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.levels.level3.backends import plain_step
from d5pipe.levels.level3.schema import DistributedConf
from d5pipe.levels.optim import make_optimizer


def batch_sizes(dist_cfg: dict[str, Any], ranks: int) -> tuple[int, int]:
    """``(global_batch, per_rank_batch)``: ``strong`` fixes the global batch, ``weak`` the per-rank."""
    scaling = setting(dist_cfg, DistributedConf, "scaling")
    if scaling == "strong":
        global_batch = int(dist_cfg["global_batch"])
        if global_batch % ranks != 0:
            raise D5PipeError(f"distributed.global_batch: {global_batch} is not divisible by "
                              f"distributed.ranks={ranks}")
        return global_batch, global_batch // ranks
    if scaling == "weak":
        per_rank = int(dist_cfg["per_rank_batch"])
        return per_rank * ranks, per_rank
    raise D5PipeError(f"distributed.scaling: unknown value {scaling!r}; known: ['strong', 'weak']")


def global_batches(n_train: int, global_batch: int, steps: int, data_seed: int) -> Iterator[np.ndarray]:
    """Index arrays of ``steps`` global batches: epochs of seeded permutations, last partial dropped."""
    if global_batch > n_train:
        raise D5PipeError(f"distributed.global_batch: {global_batch} exceeds the {n_train} training samples")
    rng = np.random.default_rng(data_seed % (1 << 32))
    per_epoch = n_train // global_batch
    perm = rng.permutation(n_train)
    pos = 0
    for _ in range(steps):
        if pos == per_epoch:
            perm, pos = rng.permutation(n_train), 0
        yield perm[pos * global_batch : (pos + 1) * global_batch]
        pos += 1


def build_model(model_cfg: dict[str, Any], input_shape: tuple[int, ...], n_classes: int, seed: int) -> torch.nn.Module:
    """The shared model builder (d5pipe.levels.models), initialised from ``seed``."""
    from d5pipe.levels.models import build_model as shared_build_model

    torch.manual_seed(seed)
    return shared_build_model(model_cfg, input_shape, n_classes)


def build_strategy(spec: dict[str, Any]) -> Any:
    """The point's strategy (d5pipe.levels.level3.strategies), built in this rank."""
    from d5pipe.levels.instantiate import build
    from d5pipe.levels.level3.strategies import Strategy

    key, target = spec["strategy"]["key"], spec["strategy"]["target"]
    strategy = build(target, key)
    if not isinstance(strategy, Strategy):
        raise D5PipeError(f"{key}: built a {type(strategy).__name__}, not a "
                          "d5pipe.levels.level3.strategies.Strategy")
    return strategy


def strategy_info(strategy: Any, model: torch.nn.Module, ranks: int, steps: range, engine: str) -> dict[str, Any]:
    """What the parent needs to know of a rank's strategy: its flags and analytic bytes."""
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    args = (gradient_bytes(model), n, ranks, list(steps), engine)
    return {"name": str(getattr(strategy, "name", type(strategy).__name__)), "class": type(strategy).__name__,
            "exact": bool(strategy.exact), "consistent": bool(strategy.consistent),
            "lockstep": bool(strategy.lockstep),
            "expected_bytes_per_step": float(strategy.expected_bytes(*args)),
            "expected_role_bytes_per_step": {k: float(v) for k, v in strategy.role_bytes(*args).items()}}


def loss_fn() -> Callable[..., torch.Tensor]:
    return torch.nn.CrossEntropyLoss()


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """All parameters, flattened into one float tensor on the CPU."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def params_sha256(model: torch.nn.Module) -> str:
    """sha256 of the parameters' bytes (exact identity check across ranks)."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of one full gradient (trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def train_serial(
    spec: dict[str, Any], x: torch.Tensor, y: torch.Tensor, input_shape: tuple[int, ...], n_classes: int
) -> torch.Tensor:
    """One process, whole global batches, rank 0's initial model: the reference run's final flat parameters."""
    model = build_model(spec["model"], input_shape, n_classes, int(spec["rank_seeds"][0]))
    step = plain_step(model, make_optimizer(spec["train"], model.parameters()), loss_fn())
    total = int(spec["warmup_steps"]) + int(spec["steps"])
    batches = global_batches(len(y), int(spec["global_batch"]), total, int(spec["data_seed"]))
    for t in map(torch.from_numpy, batches):
        step(x[t], y[t])
    return flat_params(model)
