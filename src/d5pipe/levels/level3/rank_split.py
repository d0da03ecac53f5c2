"""Where each rank's time goes in a level-3 training point: compute, communication and waiting, per
rank, and which rank (if any) is the straggler the others wait for.

Each rank records per timed step (d5pipe.levels.level3.worker): its step time (``times_s``), its time
at the lockstep barrier before the step (``barrier_s``, the barrier's own cost included) and its time
inside the collectives d5pipe counts (``collective_s``; where and how: d5pipe.levels.level3.counting).
For step ``i`` and rank ``r``:

* **compute** = step - inside: all of the step outside the counted collectives (forward, backward,
  optimizer, a rank that sleeps; a collective d5pipe does not count, such as DDP's broadcast of a
  model's buffers, falls here too);
* **communication** = the least time any rank that entered a collective in step ``i`` spent inside
  (at most rank ``r``'s own): the rank that arrives last waits for no one, so its time inside is
  the collectives' own;
* **wait** = inside - communication + barrier: blocked in a collective until the others arrived,
  and at the barrier.

The three add up to barrier + step, the rank's whole period per step; they are reported as means
over the timed steps (means add up, medians do not). Asynchronous strategies (``Strategy.lockstep``
False) get no split: their ranks' i-th steps do not happen together, so there is no "last to arrive".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5pipe.core.outcome import Metric

PARTS = ("compute", "comm", "wait")
RANK_METRIC = re.compile(r"^(compute|comm|wait)_s_per_step_rank(\d+)$")
"""A per-rank part's metric name (:func:`rank_metric`): the part and the rank."""
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_SHARE = 0.1
STRAGGLER_RULE = (
    f"the straggler is the worker whose compute per step (median over the timed steps) is more than "
    f"{STRAGGLER_RATIO:g}x the median of the other workers' and exceeds it by more than "
    f"{STRAGGLER_MIN_SHARE:.0%} of a step (the median rank's median period); only the slowest worker can "
    "be named, and a point with one worker names none"
)
SPLIT_NOTE = (
    "compute/comm/wait per rank (mean s per step): compute = step time outside the collectives d5pipe "
    "counts; comm = the least time any rank spent inside that step's collectives (the last to arrive waits "
    "for no one); wait = the rest of the rank's time inside them plus its time at the lockstep barrier; "
    "the three add up to barrier + step. " + STRAGGLER_RULE
)


def rank_metric(part: str, rank: int) -> str:
    return f"{part}_s_per_step_rank{rank}"


@dataclass(frozen=True)
class RankSplit:
    """One rank's split: means over the timed steps (seconds), and the medians the rule reads."""

    rank: int
    role: str
    compute_s: float
    comm_s: float
    wait_s: float
    compute_median_s: float
    period_median_s: float

    @property
    def period_s(self) -> float:
        """Barrier + step: what the three parts add up to."""
        return self.compute_s + self.comm_s + self.wait_s


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
    compute, wait = step - inside, inside - comm + barrier
    return [RankSplit(int(r.get("rank", i)), str(r.get("role", "worker")), float(compute[i].mean()),
                      float(comm[i].mean()), float(wait[i].mean()), float(np.median(compute[i])),
                      float(np.median(barrier[i] + step[i]))) for i, r in enumerate(ranks)]


def straggler(split: list[RankSplit]) -> tuple[int | None, float]:
    """The straggler's rank (None when no worker is one; :data:`STRAGGLER_RULE`) and the slowest
    worker's compute over the median of the others' (NaN with fewer than two workers)."""
    workers = [s for s in split if s.role == "worker"]
    if len(workers) < 2:
        return None, float("nan")
    slowest = max(workers, key=lambda s: s.compute_median_s)
    others = float(np.median([s.compute_median_s for s in workers if s is not slowest]))
    ratio = slowest.compute_median_s / others if others > 0 else float("nan")
    step = float(np.median([s.period_median_s for s in split]))
    excess = slowest.compute_median_s - others
    named = not ratio <= STRAGGLER_RATIO and excess > STRAGGLER_MIN_SHARE * step  # others' 0 s: any excess
    return (slowest.rank if named else None), ratio


def split_metrics(ranks: list[dict[str, Any]], lockstep: bool) -> tuple[list[Metric], str]:
    """Per rank ``compute_s_per_step_rank<r>``, ``comm_...``, ``wait_...`` (info, mean s per step),
    ``straggler`` (``rank <r>`` or ``none``) and ``compute_imbalance``; and the record's note."""
    if not lockstep:
        return [], ("no compute/comm/wait split per rank: an asynchronous strategy's ranks do not take "
                    "their steps together")
    split = split_ranks(ranks)
    if split is None:
        return [], "no compute/comm/wait split per rank: the ranks recorded no collective times"
    found = [Metric(rank_metric(part, s.rank), value, "s", "info")
             for s in split for part, value in zip(PARTS, (s.compute_s, s.comm_s, s.wait_s))]
    named, ratio = straggler(split)
    found += [Metric("straggler", "none" if named is None else f"rank {named}", "", "info"),
              Metric("compute_imbalance", ratio, "", "info")]
    return found, SPLIT_NOTE
