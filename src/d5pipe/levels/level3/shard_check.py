"""The check that level 3's ranks trained on disjoint shares of each epoch (issue 38, after
Deep500's sampler validation): a verdict from the sample indices the ranks actually used.

Each rank saves the indices of every step it took (``samples_rank<r>.npy``: steps x per-rank
batch, warm-up included; d5pipe.levels.level3.worker). ``rank_samples_disjoint`` passes when, at
every step, the ranks' shares are disjoint and of equal size, and no sample is drawn twice within
an epoch (``n_train // global_batch`` steps, across all ranks); the detail says how many samples each
full epoch covered and how many it leaves out (the last partial global batch is dropped).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from d5pipe.core.atomic import write_bytes
from d5pipe.core.outcome import Metric
from d5pipe.levels.level3.metrics import metric
from d5pipe.levels.verify import FAIL, passed


def samples_file(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"samples_rank{rank}.npy"


def save_samples(out_dir: Path, rank: int, shares: list[np.ndarray]) -> None:
    """Write one rank's per-step sample indices (atomically)."""
    buf = io.BytesIO()
    np.save(buf, np.stack(shares) if shares else np.empty((0, 0), dtype=np.int64))
    write_bytes(samples_file(out_dir, rank), buf.getvalue())


def check_shards(per_rank: list[np.ndarray], n_train: int, global_batch: int) -> tuple[str, str]:
    """(verdict, detail) for the ranks' index arrays (each steps x share)."""
    steps = min(len(r) for r in per_rank)
    sizes = {r.shape[1] if r.ndim == 2 else 0 for r in per_rank}
    overlapping = sum(len(np.unique(np.concatenate([r[i] for r in per_rank]))) != sum(len(r[i]) for r in per_rank)
                      for i in range(steps))
    per_epoch = max(1, n_train // global_batch)
    repeated, covered = 0, []
    for start in range(0, steps, per_epoch):
        drawn = np.concatenate([r[start:start + per_epoch].ravel() for r in per_rank])
        distinct = len(np.unique(drawn))
        repeated += distinct != len(drawn)
        if start + per_epoch <= steps:
            covered.append(distinct)
    ok = overlapping == 0 and repeated == 0 and len(sizes) == 1 and all(len(r) == steps for r in per_rank)
    cover = (f"each full epoch covered {min(covered)} of {n_train} samples ({n_train - min(covered)} left out: the "
             "last partial global batch)" if covered else f"no full epoch in {steps} steps ({per_epoch} make one)")
    detail = (f"{len(per_rank)} ranks, {steps} steps, shares of {sorted(sizes)} samples: {overlapping} steps with "
              f"overlapping shares, {repeated} epochs with a sample drawn twice; {cover}")
    return passed(ok), detail


def shard_metric(out_dir: Path, ranks: list[int], n_train: int, global_batch: int) -> Metric:
    """The verdict from the saved indices of ``ranks`` (the workers; ``fail`` when one saved none)."""
    try:
        per_rank = [np.load(samples_file(out_dir, r)) for r in ranks]
    except OSError as exc:
        return metric("rank_samples_disjoint", FAIL, detail=f"a rank's sample indices are missing ({exc})")
    verdict, detail = check_shards(per_rank, n_train, global_batch)
    return metric("rank_samples_disjoint", verdict, detail=detail)
