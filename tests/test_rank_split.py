"""Level 3, where each rank's time goes (issue 53): per rank, compute, communication and waiting
per step, and the straggler the others wait for (d5pipe.levels.level3.rank_split).

Without ranks (light): the split of recorded times adds up, the rank that computes longest is named
only when it is much slower, and the report's table shows it. With real ranks (DDP/gloo and
Horovod, 2 ranks, a small MLP whose step is long enough that a busy machine's noise is no straggler): the engine's own allreduce with rank 1 sleeping before each step
names rank 1 and shows rank 0 waiting for it; the same point without the sleep names none. Every
rank's parts add up to about the slowest rank's step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext, run_closers
from d5pipe.levels.level3.point import run_point
from d5pipe.levels.level3.rank_split import PARTS, rank_metric, split_metrics, split_ranks
from d5pipe.results.report.blocks import Table
from d5pipe.results.report.levels.distributed import rank_split_table
from tests.conftest import user_code_for_ranks

FIXTURES = Path(__file__).resolve().parent / "plugin_fixtures"
DELAY_S = 0.1
STEPS, WARMUP = 8, 2
"""DDP's second step rebuilds its buckets with a collective d5pipe does not count (its wait would be compute)."""


def _rank(rank: int, compute: float | list[float], inside: list[float], barrier: float = 0.001) -> dict[str, Any]:
    per_step = compute if isinstance(compute, list) else [compute] * len(inside)
    return {"rank": rank, "times_s": [c + t for c, t in zip(per_step, inside)], "collective_s": inside,
            "barrier_s": [barrier] * len(inside)}



def _values(metrics: list[Any]) -> dict[str, Any]:
    return {m.name: m.value for m in metrics}


def test_the_split_adds_up_and_names_only_a_much_slower_rank() -> None:
    # rank 1 computes 0.1 s longer; ranks 0 and 2 wait for it inside the allreduce (0.002 s its own time)
    ranks = [_rank(0, 0.01, [0.102, 0.103]), _rank(1, 0.11, [0.002, 0.002]), _rank(2, 0.012, [0.1, 0.101])]
    split = split_ranks(ranks)
    assert split is not None
    for s in split:
        assert s.comm_s == pytest.approx(0.002)  # the last to arrive: the collective's own time
        assert s.period_s == pytest.approx(0.1125, abs=0.001)  # about the slowest rank's step, for every rank
    assert split[0].wait_s == pytest.approx(0.1005) and split[1].wait_s == pytest.approx(0.0)
    # a rank slow after the collective: the others wait at the next barrier (less its own cost, 1 ms)
    late = split_ranks([_rank(0, 0.01, [0.002], barrier=0.101), _rank(1, 0.11, [0.002], barrier=0.001)])
    assert late is not None and late[0].wait_s == pytest.approx(0.1) and late[1].wait_s == 0.0
    assert late[0].period_s == pytest.approx(late[1].period_s)
    metrics, _ = split_metrics(ranks, lockstep=True)
    m = _values(metrics)
    assert m["straggler"] == "rank 1" and m[rank_metric("compute", 1)] == pytest.approx(0.11)
    assert m["compute_imbalance"] == pytest.approx(0.11 / 0.011)
    # twice the others' compute, but a sliver of a step dominated by communication: no straggler
    even = [_rank(0, 0.0002, [0.05, 0.05]), _rank(1, 0.0004, [0.0498, 0.0498])]
    assert _values(split_metrics(even, lockstep=True)[0])["straggler"] == "none"
    # slow in one step of four (a busy machine now and then), or in three: named only in the second case
    for slow_steps, named in ((1, "none"), (3, "rank 0")):
        bursts = [0.11] * slow_steps + [0.01] * (4 - slow_steps)
        waits = [0.102 if c > 0.1 else 0.002 for c in bursts]  # rank 1 waits for it
        pair = [_rank(0, bursts, [0.002] * 4), _rank(1, 0.01, waits)]
        assert _values(split_metrics(pair, lockstep=True)[0])["straggler"] == named
    # one worker (or an asynchronous strategy, or results without collective times): nothing to name
    assert _values(split_metrics(ranks[:1], lockstep=True)[0])["straggler"] == "none"
    assert split_metrics(ranks, lockstep=False)[0] == []
    assert split_metrics([{k: v for k, v in r.items() if k != "collective_s"} for r in ranks], True)[0] == []


def test_the_report_shows_each_ranks_split_and_the_straggler() -> None:
    metrics, _ = split_metrics([_rank(0, 0.01, [0.1]), _rank(1, 0.11, [0.002])], lockstep=True)
    rows = pd.DataFrame([{"stage": "level3", "point_id": "p1", "metric": m.name, "status": "ok",
                          "value": None if isinstance(m.value, str) else m.value,
                          "text": m.value if isinstance(m.value, str) else None} for m in metrics])
    tables = [b for b in rank_split_table(rows) if isinstance(b, Table)]
    assert len(tables) == 1 and "straggler" in tables[0].caption
    body = {row[1]: row for row in tables[0].rows}
    assert body["1"][-1] == "straggler" and body["0"][-1] == ""
    assert body["0"][2:6] == ["10", "2", "98", "110"]  # compute, comm, wait, sum in ms


def _ctx(root: Path, data: Path, cache: dict[str, Any], backend: str, strategy: str) -> PointContext:
    dist = {"backend": backend, "ranks": 2, "global_batch": 256, "steps": STEPS, "warmup_steps": WARMUP,
            "strategy": strategy, "timeout_s": 240.0, "threads_per_rank": 1, "serial_check": False,
            "custom_strategies": {"slow": {"_target_": "user_strategies.SlowRankAllReduce", "delay_s": DELAY_S}}}
    config = {"name": "split", "seed": 3, "distributed": dist, "model": {"name": "mlp", "hidden": [512, 512]},
              "dataset": {"name": "digits"}, "train": {"optimizer": "sgd", "lr": 0.1}, "timer": {}}
    work = root / f"{backend}-{strategy}"
    work.mkdir(parents=True, exist_ok=True)
    return PointContext("split", "level3", strategy, {"distributed.strategy": strategy}, config, 11, root, work,
                        data, {"name": "local"}, cache)


def _parts(out: PointOutcome) -> tuple[dict[str, Any], dict[int, dict[str, float]]]:
    m = {x.name: x.value for x in out.metrics}
    return m, {r: {p: float(m[rank_metric(p, r)]) for p in PARTS} for r in range(2)}


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["ddp", "horovod"])
def test_a_rank_made_slow_is_named_the_straggler(backend: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    user_code_for_ranks(monkeypatch, "user_strategies", FIXTURES)  # the ranks import the slow strategy
    cache: dict[str, Any] = {}
    (tmp_path / "data").mkdir()
    try:  # both points in one rank session
        even = run_point(_ctx(tmp_path, tmp_path / "data", cache, backend, "allreduce"))
        slow = run_point(_ctx(tmp_path, tmp_path / "data", cache, backend, "slow"))
    finally:
        run_closers(cache)
    m, parts = _parts(even)
    assert m["straggler"] == "none", parts
    assert all(v >= 0 for p in parts.values() for v in p.values()), parts
    assert all(p["comm"] > 0 for p in parts.values()), parts  # the engine's collectives were timed
    m, parts = _parts(slow)
    assert m["straggler"] == "rank 1", parts
    assert parts[1]["compute"] >= DELAY_S  # its sleep is compute
    assert parts[0]["wait"] > DELAY_S / 2 > parts[0]["compute"], parts  # rank 0 waits for it
    # lockstep: every rank's parts add up to about the slowest rank's step
    round_s = float(np.mean(slow.samples["step_time_max_s"]))
    for p in parts.values():
        assert sum(p.values()) == pytest.approx(round_s, rel=0.25), (parts, round_s)
