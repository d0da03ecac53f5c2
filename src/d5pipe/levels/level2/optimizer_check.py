"""Level 2 ``optimizer_check``: the point's optimizer against the reference optimizer it declares.

With ``train.reference_optimizer`` set (a built-in such as ``sgd`` or a key of
``train.custom_optimizers``), two copies of the point's freshly initialised model are trained for
``train.reference_steps`` steps: one by the point's optimizer, one by the reference, on the same
seeded batches (the point's batch size, its own sampler seed), with the same dropout masks (the
torch RNG is re-seeded identically before each step of each copy). The result:

* ``optimizer_divergence`` = ``||p - p_ref|| / ||p_ref - p_0||`` over all parameters (float64):
  the distance between the two trajectories relative to how far the reference moved the weights,
  so a 1% error in every update gives about 0.01 and a sign error about 1 or more;
* ``optimizer_check``: ``fail`` when the divergence exceeds ``train.reference_tolerance``
  (default 1e-3, in float32), ``pass`` when it does not and the tolerance is below
  ``train.detect_rel_error`` (default 0.01), ``undetectable`` otherwise (d5pipe.levels.verify).

Two implementations of the same rule differ only by float32 rounding: the reference optimizers
of this repository agree with their re-implementations to below 1e-5 (tests/test_verification.py).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch
from torch import nn

from d5pipe.core.outcome import Metric
from d5pipe.core.seeds import derive_seed
from d5pipe.levels.datasets import Dataset
from d5pipe.levels.level2.metrics import metric
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level2.train_loop import make_loader
from d5pipe.levels.optim import make_optimizer
from d5pipe.levels.verify import flat_params, relative_divergence, verdict


def _steps(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[tuple[torch.Tensor, torch.Tensor]],
           seed: int) -> None:
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for i, (xb, yb) in enumerate(batches):
        torch.manual_seed(derive_seed(seed, f"optimizer_check/{i}") % 2**63)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(xb), yb).backward()
        optimizer.step()


def check_optimizer(initial: nn.Module, data: Dataset, train_cfg: dict[str, Any], conf: TrainConf, seed: int,
                    device: torch.device) -> tuple[list[Metric], dict[str, Any]]:
    """Metrics ``optimizer_check`` and ``optimizer_divergence`` (see the module docstring)."""
    loader = make_loader(data.x_train, data.y_train, conf.batch_size, derive_seed(seed, "optimizer_check"), 0, device)
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    while len(batches) < conf.reference_steps:
        # islice: only the batches used are gathered (a generated dataset's epoch may be huge)
        batches += list(itertools.islice(loader, conf.reference_steps - len(batches)))
    model = copy.deepcopy(initial).to(device)
    reference = copy.deepcopy(initial).to(device)
    start = flat_params(reference)
    _steps(model, make_optimizer(train_cfg, model.parameters()), batches, seed)
    _steps(reference, make_optimizer(train_cfg, reference.parameters(), conf.reference_optimizer), batches, seed)
    div = relative_divergence(flat_params(model), flat_params(reference), start)
    result = verdict(div, conf.reference_tolerance, conf.detect_rel_error)
    metrics = [metric("optimizer_check", result), metric("optimizer_divergence", div)]
    extra = {"reference_optimizer": conf.reference_optimizer, "steps": len(batches),
             "tolerance": conf.reference_tolerance, "detect_rel_error": conf.detect_rel_error,
             "note": "||p - p_ref|| / ||p_ref - p_0|| after the same steps from the same weights on the "
                     "same batches; pass: within train.reference_tolerance, which is below detect_rel_error"}
    return metrics, extra
