"""What a level-3 training run reached, next to what its communication cost (issue 40, item 3).

* ``test_loss``/``test_accuracy``: rank 0's final model (``params_rank0.pt``) on the test split, in
  the shard process after the ranks are done. For a strategy whose replicas differ (local SGD, ring
  averaging) it is rank 0's replica, as the record's note says.
* with ``distributed.target_loss``: ``steps_to_target_loss`` and ``time_to_target_loss_s``, the
  first timed step whose loss, averaged over the training ranks (a server has none), is at or below
  the target, and the step times (each the slowest rank's) up to and including it; NaN with a note
  when never reached.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.core.outcome import Metric
from d5pipe.levels.datasets import Dataset, require_materialised
from d5pipe.levels.level2.train_loop import evaluate
from d5pipe.levels.level3 import training
from d5pipe.levels.level3.metrics import metric
from d5pipe.levels.level3.outcome import max_over_ranks, workers_of

EVAL_BATCH = 512


def test_metrics(spec: dict[str, Any], data: Dataset, out_dir: Path) -> list[Metric]:
    """Rank 0's final model on the test split."""
    _, _, x_test, y_test = require_materialised(data, "level 3's test evaluation")
    model = training.build_model(spec["model"], data.input_shape, data.n_classes, int(spec["rank_seeds"][0]))
    flat = torch.load(out_dir / "params_rank0.pt")
    torch.nn.utils.vector_to_parameters(flat.to(next(model.parameters()).dtype), model.parameters())
    loss, accuracy = evaluate(model, x_test, y_test, EVAL_BATCH, torch.device("cpu"))
    return [metric("test_loss", loss), metric("test_accuracy", accuracy)]


def target_metrics(spec: dict[str, Any], ranks: list[dict[str, Any]], target: float) -> tuple[list[Metric], str | None]:
    """Steps and time to ``target`` mean loss (see the module docstring), and a note when never reached."""
    warmup = int(spec["warmup_steps"])
    losses = np.mean(np.asarray([r["losses"] for r in workers_of(ranks)], dtype=np.float64), axis=0)[warmup:]
    times = max_over_ranks([r["times_s"] for r in ranks])
    hit = next((j for j, loss in enumerate(losses) if loss <= target), None)
    steps = math.nan if hit is None else float(hit + 1)
    seconds = math.nan if hit is None else float(sum(times[: hit + 1]))
    note = None if hit is not None else (
        f"target loss {target:g} never reached in {len(losses)} timed steps (lowest mean loss "
        f"{float(losses.min()) if len(losses) else math.nan:.4g}); time_to_target_loss_s is NaN")
    return [metric("steps_to_target_loss", steps), metric("time_to_target_loss_s", seconds)], note
