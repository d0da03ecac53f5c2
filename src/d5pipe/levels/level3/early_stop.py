"""``distributed.early_stop``: a level-3 training run stopped before ``distributed.steps``, decided
by level 2's :class:`~d5pipe.levels.level2.early_stop.EarlyStop` after every timed step (warm-up
steps are never judged) on the **mean loss of the worker ranks** -- the value
``steps_to_target_loss`` reads (d5pipe.levels.level3.quality); a parameter server's servers have no
loss and are left out of the mean.

* ``target``: the mean worker loss is at or below ``distributed.target_loss``;
* ``plateau``: it has not fallen by more than ``distributed.early_stop_min_delta`` below its best
  for ``distributed.early_stop_patience`` steps (mini-batch losses are noisy: allow several steps);
* ``either``: whichever comes first.

Every rank stops after the same step: after each timed step (off the clock, its bytes not counted)
the ranks allgather ``[loss, 1]`` (a worker) or ``[0, 0]`` (a server) and each computes the same mean
from the same numbers in rank order (:func:`shared_mean_loss`). With ``off`` nothing is exchanged.
The exchange is a synchronisation: an asynchronous strategy's ranks (``ps_async``) then cannot run
more than one step apart. Torch-free at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from d5pipe.levels.level2.early_stop import EarlyStop, Wording, check_early_stop

if TYPE_CHECKING:
    import torch

    from d5pipe.levels.level3.backends import Backend

STEPS = Wording("step", "distributed.steps", "distributed.target_loss", "mean worker loss", "mean worker loss", False)
"""After each timed step: the workers' mean loss against ``distributed.target_loss``, and its plateau."""


def spec_of(dist: dict[str, Any]) -> dict[str, Any]:
    """What the ranks need to decide (the spec's ``early_stop``), from a resolved ``distributed`` section."""
    return {"mode": str(dist["early_stop"]), "target": dist["target_loss"],
            "patience": int(dist["early_stop_patience"]), "min_delta": float(dist["early_stop_min_delta"])}


def from_spec(spec: dict[str, Any]) -> EarlyStop:
    """The rank's decider (``off`` for a spec written without one)."""
    conf = spec.get("early_stop") or {"mode": "off", "target": None, "patience": 1, "min_delta": 0.0}
    target = None if conf["target"] is None else float(conf["target"])
    return EarlyStop(str(conf["mode"]), target, int(conf["patience"]), float(conf["min_delta"]), words=STEPS)


def shared_mean_loss(backend: Backend, loss: float, worker: bool, device: torch.device | None = None) -> float:
    """The mean of the workers' ``loss`` of this step, the same number on every rank (every rank
    must call it; the caller resets the byte counter after it). The exchange's tensor lives on
    ``device``, the training's (NCCL gathers device tensors)."""
    import torch

    mine = torch.tensor([loss if worker else 0.0, 1.0 if worker else 0.0], dtype=torch.float64, device=device)
    rows = backend.allgather(mine).reshape(-1, 2).cpu().tolist()
    total = 0.0
    for value, weight in rows:  # rank order: the same sum on every rank
        total += value * weight
    count = sum(weight for _, weight in rows)
    return total / count if count else float("nan")


def check(dist: dict[str, Any]) -> None:
    """``target`` and ``either`` need ``distributed.target_loss``."""
    check_early_stop(dist, "distributed", "target_loss", None)
