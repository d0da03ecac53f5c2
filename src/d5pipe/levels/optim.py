"""Optimizers and LR schedulers for levels 2 and 3: the built-in targets and the one way to build them.

Built-ins are registered targets (d5pipe.levels.targets): ``train.optimizer: sgd`` is
``{_target_: d5pipe.levels.optim.sgd, lr: ..., momentum: ..., weight_decay: ...}`` with the values
of the ``train`` section; a user optimizer is any ``torch.optim.Optimizer`` factory in
``train.custom_optimizers``, called with ``params`` (its other arguments are its own, e.g.
``lr: ${train.lr}``). Schedulers are called with ``optimizer`` and stepped once per epoch.

Any class of ``torch.optim`` / ``torch.optim.lr_scheduler`` can be named safely, without
allowing all of torch: ``{_target_: d5pipe.levels.optim.torch_optimizer, cls: RMSprop, lr: 0.01}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import conf_from_dict
from d5pipe.levels.instantiate import build
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.targets import target_of

Params = Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]]


def sgd(params: Params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The built-in ``sgd`` (torch.optim.SGD with momentum)."""
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def adam(params: Params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The built-in ``adam``."""
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)


def adamw(params: Params, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The built-in ``adamw``."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def torch_optimizer(params: Params, cls: str, **kwargs: Any) -> torch.optim.Optimizer:
    """Any ``torch.optim.<cls>`` (an Optimizer subclass) with ``kwargs``."""
    klass = getattr(torch.optim, cls, None)
    if not (isinstance(klass, type) and issubclass(klass, torch.optim.Optimizer)):
        raise D5PipeError(f"torch_optimizer: torch.optim has no optimizer {cls!r}")
    return klass(params, **kwargs)


def constant(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    """The built-in ``constant`` schedule."""
    return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)


def cosine(optimizer: torch.optim.Optimizer, epochs: int) -> torch.optim.lr_scheduler.LRScheduler:
    """The built-in ``cosine`` schedule: to 0 over ``epochs``."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=int(epochs))


def step(optimizer: torch.optim.Optimizer, epochs: int, step_epochs: int, gamma: float) -> torch.optim.lr_scheduler.LRScheduler:
    """The built-in ``step`` schedule: x ``gamma`` every ``step_epochs`` epochs (0: ``epochs // 3``, at least 1)."""
    period = int(step_epochs) if int(step_epochs) > 0 else max(1, int(epochs) // 3)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=period, gamma=gamma)


def torch_scheduler(optimizer: torch.optim.Optimizer, cls: str, **kwargs: Any) -> torch.optim.lr_scheduler.LRScheduler:
    """Any ``torch.optim.lr_scheduler.<cls>`` with ``kwargs``."""
    klass = getattr(torch.optim.lr_scheduler, cls, None)
    if not (isinstance(klass, type) and issubclass(klass, torch.optim.lr_scheduler.LRScheduler)):
        raise D5PipeError(f"torch_scheduler: torch.optim.lr_scheduler has no scheduler {cls!r}")
    return klass(optimizer, **kwargs)


def train_section(train_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``train`` section filled with its schema defaults (every value checked)."""
    return dataclasses.asdict(conf_from_dict(TrainConf, "train", train_cfg))


def make_optimizer(train_cfg: Mapping[str, Any] | None, params: Params, name: str | None = None) -> torch.optim.Optimizer:
    """The optimizer ``train.optimizer`` (or ``name``) selects, over ``params``."""
    key, target = target_of(train_section(train_cfg), "optimizer", name)
    opt = build(target, key, params=params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise D5PipeError(f"{key}: built a {type(opt).__name__}, not a torch.optim.Optimizer")
    return opt


def make_scheduler(train_cfg: Mapping[str, Any] | None, optimizer: torch.optim.Optimizer) -> Any:
    """The LR scheduler ``train.schedule`` selects for ``optimizer`` (stepped once per epoch)."""
    key, target = target_of(train_section(train_cfg), "scheduler")
    sched = build(target, key, optimizer=optimizer)
    if not callable(getattr(sched, "step", None)):
        raise D5PipeError(f"{key}: built a {type(sched).__name__}, which has no step()")
    return sched
