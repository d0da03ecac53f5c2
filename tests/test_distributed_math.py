"""Level 3 arithmetic: nccl-tests bandwidths, ring traffic, batch split, scaling table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from d5pipe import D5PipeError
from d5pipe.levels.level3.collectives import (
    actual_message_bytes,
    busbw_factor,
    elements_per_rank,
    run_collective,
)
from d5pipe.levels.level3.scaling import ring_allreduce_bytes, scaling_table
from d5pipe.levels.level3.strategies import Strategy
from d5pipe.levels.level3.training import batch_sizes, global_batches


def test_busbw_factors_follow_nccl_tests() -> None:
    assert busbw_factor("allreduce", 1) == 0.0
    assert busbw_factor("allreduce", 2) == 1.0
    assert busbw_factor("allreduce", 4) == 1.5
    assert busbw_factor("allreduce", 8) == 1.75
    assert busbw_factor("allgather", 4) == 0.75
    assert busbw_factor("broadcast", 4) == 1.0
    with pytest.raises(D5PipeError, match="distributed.collective"):
        busbw_factor("alltoall", 4)


class _OneRank:
    """A one-rank engine whose prepared call counts its calls and returns ``result(t)``."""

    name, rank, size = "mpi", 0, 1

    def __init__(self, result) -> None:  # type: ignore[no-untyped-def]
        self.result, self.calls, self.barriers = result, 0, 0

    def barrier(self) -> None:
        self.barriers += 1

    def prepared(self, collective, t):  # type: ignore[no-untyped-def]
        def call():  # type: ignore[no-untyped-def]
            self.calls += 1
            return self.result(t)
        return call


@pytest.mark.parametrize(("result", "correct"), [(lambda t: t, True), (lambda t: t * 2, False)])
def test_the_collective_timed_is_the_one_checked(result, correct) -> None:  # type: ignore[no-untyped-def]
    """run_collective checks and times the engine's prepared call (Backend.prepared): an engine whose
    call computes something else fails the check; one check call, then warm-up + timed calls."""
    engine = _OneRank(result)
    got = run_collective(engine, {"collective": "allreduce", "message_bytes": 64, "steps": 5,  # type: ignore[arg-type]
                                  "warmup_steps": 2, "buffer": "engine"})
    assert got["correct"] is correct
    assert engine.calls == 1 + 2 + 5 and engine.barriers == 2 + 5 and len(got["times_s"]) == 5


def test_message_sizes_round_to_whole_elements() -> None:
    assert elements_per_rank("allreduce", 1024, 4) == 256
    assert elements_per_rank("allgather", 1024, 4) == 64  # S is the gathered size
    assert actual_message_bytes("allgather", 1000, 3) == 996
    with pytest.raises(D5PipeError, match="message_bytes"):
        elements_per_rank("allreduce", 2, 2)


def test_ring_allreduce_bytes() -> None:
    assert ring_allreduce_bytes(1000, 1) == 0.0
    assert ring_allreduce_bytes(1000, 2) == 1000.0
    assert ring_allreduce_bytes(1000, 4) == 1500.0


def test_batch_sizes_strong_and_weak() -> None:
    assert batch_sizes({"scaling": "strong", "global_batch": 64, "per_rank_batch": 8}, 4) == (64, 16)
    assert batch_sizes({"scaling": "weak", "global_batch": 64, "per_rank_batch": 8}, 4) == (32, 8)
    with pytest.raises(D5PipeError, match="global_batch"):
        batch_sizes({"scaling": "strong", "global_batch": 10, "per_rank_batch": 8}, 4)
    with pytest.raises(D5PipeError, match="distributed.scaling"):
        batch_sizes({"scaling": "diagonal", "global_batch": 64, "per_rank_batch": 8}, 4)


def test_rank_slices_partition_each_global_batch() -> None:
    batches = list(global_batches(100, 20, 12, data_seed=7))
    again = list(global_batches(100, 20, 12, data_seed=7))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # seeded
    assert len(batches) == 12 and all(len(b) == 20 for b in batches)
    assert sorted(np.concatenate(batches[:5]).tolist()) == list(range(100))  # one epoch
    for b in batches:
        parts = [Strategy().share(b, r, 4) for r in range(4)]
        assert np.array_equal(np.concatenate(parts), b)


def _rows(backend: str, scaling: str, times: dict[int, tuple[float, float, float]]) -> list[dict[str, object]]:
    return [
        {"stage": "level3", "status": "ok", "metric": "time_per_step_s", "value": v, "ci_low": lo,
         "ci_high": hi, "distributed.backend": backend, "distributed.scaling": scaling,
         "distributed.ranks": n, "distributed.benchmark": "train"}
        for n, (v, lo, hi) in times.items()
    ]


def test_scaling_table_strong_weak_and_missing_base() -> None:
    rows = _rows("ddp", "strong", {1: (1.0, 0.9, 1.1), 2: (0.625, 0.5, 0.7)})
    rows += _rows("ddp", "weak", {1: (1.0, 0.9, 1.1), 4: (1.25, 1.2, 1.3)})
    rows += _rows("mpi", "strong", {2: (0.5, 0.4, 0.6)})  # no 1-rank base
    rows.append({**rows[1], "status": "failed", "value": 99.0})  # ignored
    rows.append({**rows[1], "metric": "samples_per_s", "value": 5.0})  # other metric
    table = scaling_table(pd.DataFrame(rows))
    assert len(table) == 5
    s = table[(table["distributed.scaling"] == "strong") & (table["distributed.backend"] == "ddp")]
    two = s[s["ranks"] == 2].iloc[0]
    assert two["speedup"] == pytest.approx(1.6)
    assert two["efficiency"] == pytest.approx(0.8)
    assert two["speedup_ci_low"] == pytest.approx(0.9 / 0.7)
    assert two["speedup_ci_high"] == pytest.approx(1.1 / 0.5)
    assert two["base_time_s"] == 1.0
    one = s[s["ranks"] == 1].iloc[0]
    assert one["speedup"] == one["speedup_ci_low"] == one["speedup_ci_high"] == pytest.approx(1.0)
    w = table[table["distributed.scaling"] == "weak"]
    four = w[w["ranks"] == 4].iloc[0]
    assert four["speedup"] == pytest.approx(4 * 1.0 / 1.25)
    assert four["efficiency"] == pytest.approx(0.8)
    assert four["efficiency_ci_low"] == pytest.approx(0.9 / 1.3)
    m = table[table["distributed.backend"] == "mpi"].iloc[0]
    assert math.isnan(m["speedup"]) and m["time_s"] == 0.5


def test_scaling_table_without_swept_backend_column() -> None:
    rows = _rows("ddp", "strong", {1: (2.0, 1.8, 2.2), 2: (1.0, 0.9, 1.1)})
    df = pd.DataFrame(rows).drop(columns=["distributed.backend", "distributed.scaling"])
    table = scaling_table(df)
    assert table["speedup"].tolist() == pytest.approx([1.0, 2.0])
    with pytest.raises(ValueError, match="distributed.ranks"):
        scaling_table(df.drop(columns=["distributed.ranks"]))


def test_nodes_that_grow_with_the_ranks_share_one_base() -> None:
    """scaling_nodes zips distributed.nodes with distributed.ranks: each size is measured against
    the 1-rank (1-node) point, not left without a base because its node count differs (on the
    16-node sandbox every speedup but the base's was missing)."""
    rows = _rows("mpi", "strong", {1: (2.0, 1.8, 2.2), 2: (1.0, 0.9, 1.1), 4: (1.0, 0.9, 1.1)})
    for row in rows:
        row["distributed.nodes"] = row["distributed.ranks"]
    table = scaling_table(pd.DataFrame(rows))
    assert table["speedup"].tolist() == pytest.approx([1.0, 2.0, 2.0])
    assert table["efficiency"].tolist() == pytest.approx([1.0, 1.0, 0.5])


def test_rank_shares_are_checked_from_the_indices_the_ranks_used() -> None:
    from d5pipe.levels.level3.shard_check import check_shards

    batches = list(global_batches(100, 16, 13, data_seed=3))  # 6 steps an epoch: 2 full epochs and 1 step
    shares = [np.stack([Strategy().share(b, r, 4) for b in batches]) for r in range(4)]
    verdict, detail = check_shards(shares, 100, 16)
    assert verdict == "pass" and "covered 96 of 100 samples (4 left out" in detail
    shares[2][5] = shares[1][5]  # two ranks train on the same share at step 5
    verdict, detail = check_shards(shares, 100, 16)
    assert verdict == "fail" and "1 steps with overlapping shares" in detail
