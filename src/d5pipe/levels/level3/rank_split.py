"""Where each rank's time goes in a level-3 training point: compute, communication and waiting, per
rank, and which rank (if any) is the straggler the others wait for.

Each rank records per timed step (d5pipe.levels.level3.worker): its step time (``times_s``), its time
at the lockstep barrier before the step (``barrier_s``) and its time
inside the collectives d5pipe counts (``collective_s``; where and how: d5pipe.levels.level3.counting).
For step ``i`` and rank ``r``:

* **compute** = step - inside: all of the step outside the counted collectives (forward, backward,
  optimizer, a rank that sleeps; a collective d5pipe does not count, such as DDP's broadcast of a
  model's buffers, falls here too);
* **communication** = the least time any rank that entered a collective in step ``i`` spent inside
  (at most rank ``r``'s own): the rank that arrives last waits for no one, so its time inside is
  the collectives' own;
* **wait** = inside - communication, plus barrier - the least time any rank spent at that barrier:
  blocked in a collective until the others arrived, and at the barrier until the last rank came
  from its previous step. The barrier's own cost (what the last to arrive spends there) is d5pipe's
  synchronisation between timed steps, not the training's, and is left out.

The three add up to the rank's step plus its wait at the barrier: in lockstep, about the slowest
rank's step (``time_per_step_s``), for every rank. They are reported as means over the timed steps
(means add up, medians do not). Asynchronous strategies (``Strategy.lockstep``
False) get no split: their ranks' i-th steps do not happen together, so there is no "last to arrive".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from d5pipe.core.outcome import Metric, fill, name_regex
from d5pipe.levels.level3.metrics import PARTS, RANK_SPLIT, metric

RANK_METRIC = name_regex(RANK_SPLIT)
"""A per-rank part's metric name (:func:`rank_metric`; ``fullmatch``): the part and the rank."""
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_SHARE = 0.1
STRAGGLER_STEPS = 0.75
STRAGGLER_RULE = (
    f"a worker lags in a step when its compute is more than {STRAGGLER_RATIO:g}x the median of the other "
    f"workers' in that step and longer by more than {STRAGGLER_MIN_SHARE:.0%} of the step (the median over "
    f"ranks of compute + comm + wait); the straggler is the worker that lags in at least {STRAGGLER_STEPS:.0%} "
    "of the timed steps (the one that lags most often, then computes longest, if several), so a rank a busy "
    "machine slowed now and then is none; a point with one worker names none"
)
"""The straggler rule, in one place (:func:`lag_shares` applies it)."""
SPLIT_NOTE = (
    "compute/comm/wait per rank (mean s per step): compute = step time outside the collectives d5pipe "
    "counts; comm = the least time any rank spent inside that step's collectives (the last to arrive waits "
    "for no one); wait = the rest of the rank's time inside them plus its wait at the lockstep barrier for "
    "the last rank (the barrier's own cost left out); the three add up to about the slowest rank's step. "
    + STRAGGLER_RULE
)


def rank_metric(part: str, rank: int) -> str:
    return fill(RANK_SPLIT, part, rank)


@dataclass(frozen=True)
class RankSplit:
    """One rank's split: means over the timed steps (seconds), its median compute, and the share of
    steps it lagged in (:data:`STRAGGLER_RULE`; 0 for a rank of another role than worker)."""

    rank: int
    role: str
    compute_s: float
    comm_s: float
    wait_s: float
    compute_median_s: float
    lagged: float

    @property
    def period_s(self) -> float:
        """compute + comm + wait: the step and the wait at the barrier before it."""
        return self.compute_s + self.comm_s + self.wait_s


def lag_shares(compute: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Per worker (rows; steps in columns), the share of steps in which it lagged (:data:`STRAGGLER_RULE`)."""
    n = compute.shape[0]
    if n < 2:
        return np.zeros(n)
    step = np.median(period, axis=0)
    shares = []
    for k in range(n):
        others = np.median(np.delete(compute, k, axis=0), axis=0)
        lags = (compute[k] > STRAGGLER_RATIO * others) & (compute[k] - others > STRAGGLER_MIN_SHARE * step)
        shares.append(float(lags.mean()))
    return np.asarray(shares)


def split_ranks(ranks: list[dict[str, Any]]) -> list[RankSplit] | None:
    """Each rank's split (module docstring), or None when a rank recorded no collective times."""
    if not ranks or any("collective_s" not in r or "barrier_s" not in r for r in ranks):
        return None
    step = np.asarray([r["times_s"] for r in ranks], dtype=np.float64)
    barrier = np.asarray([r["barrier_s"] for r in ranks], dtype=np.float64)
    inside = np.minimum(np.asarray([r["collective_s"] for r in ranks], dtype=np.float64), step)
    if step.ndim != 2 or step.shape[1] == 0 or barrier.shape != step.shape or inside.shape != step.shape:
        return None
    entered = np.where(inside > 0, inside, np.inf)
    floor = entered.min(axis=0)  # per step: the least time inside of the ranks that entered a collective
    comm = np.minimum(inside, np.where(np.isfinite(floor), floor, 0.0))
    compute, wait = step - inside, inside - comm + barrier - barrier.min(axis=0)
    workers = [i for i, r in enumerate(ranks) if str(r.get("role", "worker")) == "worker"]
    lagged = np.zeros(len(ranks))
    lagged[workers] = lag_shares(compute[workers], (compute + comm + wait)[workers])
    return [RankSplit(int(r.get("rank", i)), str(r.get("role", "worker")), float(compute[i].mean()),
                      float(comm[i].mean()), float(wait[i].mean()), float(np.median(compute[i])), float(lagged[i]))
            for i, r in enumerate(ranks)]


def straggler(split: list[RankSplit]) -> tuple[int | None, float]:
    """The straggler's rank (None when no worker is one; :data:`STRAGGLER_RULE`) and the imbalance:
    the largest median compute of a worker over the median of the other workers' (NaN with fewer
    than two workers)."""
    workers = [s for s in split if s.role == "worker"]
    if len(workers) < 2:
        return None, float("nan")
    slowest = max(workers, key=lambda s: s.compute_median_s)
    others = float(np.median([s.compute_median_s for s in workers if s is not slowest]))
    ratio = slowest.compute_median_s / others if others > 0 else float("nan")
    lagging = max(workers, key=lambda s: (s.lagged, s.compute_median_s))
    return (lagging.rank if lagging.lagged >= STRAGGLER_STEPS else None), ratio


def split_metrics(ranks: list[dict[str, Any]], lockstep: bool) -> tuple[list[Metric], str]:
    """Per rank ``compute_s_per_step_rank<r>``, ``comm_...``, ``wait_...`` (info, mean s per step),
    ``straggler`` (``rank <r>`` or ``none``) and ``compute_imbalance``; and the record's note."""
    if not lockstep:
        return [], ("no compute/comm/wait split per rank: an asynchronous strategy's ranks do not take "
                    "their steps together")
    split = split_ranks(ranks)
    if split is None:
        return [], "no compute/comm/wait split per rank: the ranks recorded no collective times"
    found = [metric(rank_metric(part, s.rank), value)
             for s in split for part, value in zip(PARTS, (s.compute_s, s.comm_s, s.wait_s))]
    named, ratio = straggler(split)
    found += [metric("straggler", "none" if named is None else f"rank {named}"), metric("compute_imbalance", ratio)]
    return found, SPLIT_NOTE
