"""Distributed strategies: each reports payload bytes per rank per step within 5% of its own
analytic expectation, on 2 and 4 ranks, on every engine that supports it (real ranks).

The built-ins (allreduce, topk, local_sgd, ring) run on DDP/gloo, mpi4py and Horovod; the
example's user strategy (examples/byo: float16 allreduce) declares it cannot run on mpi4py, so
that point is skipped with the reason. An exact strategy must match the serial model; a lossy one
reports its divergence and is not failed for it.

What is counted is the bytes each rank hands to the engine's collectives and point-to-point calls
(the backend wrappers' counter), held against the strategy's own formula and, where it does not
depend on that formula, against the model: allreduce hands over exactly the gradient's bytes and the
float16 strategy half of them. Bytes that moved on the wire are not measured (NIC counters miss
intra-node traffic, and gloo, MPI and NCCL choose their own algorithms); ``comm_ring_expected_bytes``
reports what a ring would move.

Without launched ranks (light, run by default): the ranks are threads of an engine of this file that
moves the tensors between them itself and tallies what each rank hands it, apart from the
Communicator's counter. Every step the counter must equal that tally, and the strategy's formula
its mean: a strategy that bypasses the Communicator, or a counter and a formula wrong the same way,
fails there (the real engines' own counts, DDP's hook, Horovod's wrapper and mpi4py's buffer, need
launched ranks: the slow test above).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped, run_closers
from d5pipe.levels.level3.backends import ByteCounter, StepFn, flat_grads, plain_step, set_grads, trainable
from d5pipe.levels.level3.point import run_point
from d5pipe.levels.level3.strategies import DPSGD, AllReduce, Communicator, LocalSGD, RingAverage, Strategy, TopK
from tests.conftest import user_code_for_ranks

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "byo"
BUILTIN = ("allreduce", "topk", "local_sgd", "ring")
STEPS, WARMUP = 8, 1
TARGET_LOSS = 2.0
"""Below every batch's loss at initialisation (2.27 to 2.38 on digits, 10 classes) and reached within
the STEPS timed steps of the serial run at lr 0.5 (1.6 to 1.9 by then; checked on 8 seeds): only a
strategy that really trains reaches it, and never at the first timed step."""


def test_analytic_expectations() -> None:
    assert TopK(0.01).expected_bytes(4 * 1000, 1000, 2, range(8), "ddp") == 8 * 10
    assert LocalSGD(4).expected_bytes(400, 100, 2, range(1, 9), "ddp") == 400 * 2 / 8  # syncs after 3, 7
    assert [RingAverage.peers(r, 4) for r in range(4)] == [[1, 3], [0, 2], [1, 3], [0, 2]]
    assert RingAverage().expected_bytes(400, 100, 2, range(8), "mpi") == 400  # one neighbour
    assert RingAverage().expected_bytes(400, 100, 1, range(8), "mpi") == 0


def _ctx(root: Path, data: Path, cache: dict[str, Any], backend: str, ranks: int, strategy: str) -> PointContext:
    dist = {"backend": backend, "ranks": ranks, "global_batch": 32, "steps": STEPS, "warmup_steps": WARMUP,
            "strategy": strategy, "timeout_s": 240.0, "threads_per_rank": 1, "target_loss": TARGET_LOSS,
            "custom_strategies": {"fp16": {"_target_": "mypkg.strategy.FP16AllReduce"}}}
    config = {"name": "strategies", "seed": 3, "distributed": dist, "model": {"name": "mlp", "hidden": [32]},
              "dataset": {"name": "digits"}, "train": {"optimizer": "sgd", "lr": 0.5, "momentum": 0.9},
              "timer": {}}
    work = root / f"{backend}{ranks}-{strategy}"
    work.mkdir(parents=True, exist_ok=True)
    # a strategy sweep (distributed.strategy swept): the points' own seeds differ, their training seed does not
    return PointContext("strategies", "level3", strategy, {"distributed.strategy": strategy}, config,
                        17 + len(strategy), root, work, data, {"name": "local"}, cache)


def _m(out: PointOutcome) -> dict[str, Any]:
    return {**{m.name: m.value for m in out.metrics}, "first_loss": out.extra["losses_rank0"][0]}


@pytest.mark.slow
@pytest.mark.mpi
# every engine and both rank counts, not their product (the six pairs took 180 s of `make test`'s heavy
# lane, horovod's two 109 s): every strategy at 2 and 4 ranks is counted against its expectation without
# an engine by test_counted_and_expected_bytes_are_the_bytes_handed_to_the_engine below
@pytest.mark.parametrize(("backend", "ranks"), [("ddp", 4), ("mpi", 2), ("horovod", 2)])
def test_bytes_per_rank_step_match_the_analytic_expectation(
        backend: str, ranks: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user_code_for_ranks(monkeypatch, "mypkg", EXAMPLE)  # the ranks import the user strategy
    cache: dict[str, Any] = {}
    data = tmp_path / "data"
    data.mkdir()
    seen: dict[str, dict[str, Any]] = {}
    try:
        for strategy in (*BUILTIN, "fp16"):
            ctx = _ctx(tmp_path, data, cache, backend, ranks, strategy)
            if strategy == "fp16" and backend == "mpi":
                with pytest.raises(PointSkipped, match="does not run on backend 'mpi'"):
                    run_point(ctx)
                continue
            m = seen[strategy] = _m(run_point(ctx))
            counted, expected = m["comm_payload_bytes_per_rank_step"], m["comm_expected_payload_bytes_per_rank_step"]
            assert expected > 0 and abs(counted / expected - 1) <= 0.05, (strategy, counted, expected)
            assert m["strategy"] == strategy
            assert math.isfinite(m["serial_max_abs_diff"])
            assert 0 <= m["test_accuracy"] <= 1 and math.isfinite(m["test_loss"])
            reached = m["steps_to_target_loss"]
            assert not reached <= 1, (strategy, reached)  # NaN (never) or later: the first loss is above the target
            if strategy in ("allreduce", "fp16"):  # train as the serial model does: they reach it
                assert 1 < reached <= STEPS and m["time_to_target_loss_s"] > 0, (strategy, reached)
    finally:
        run_closers(cache)
    assert seen["allreduce"]["matches_serial"] == "pass" and seen["allreduce"]["params_identical"] == "pass"
    # one starting model and one batch order for every strategy: the first step's loss is the same
    assert len({round(m["first_loss"], 6) for m in seen.values()}) == 1
    grad = seen["allreduce"]["gradient_bytes"]
    assert seen["allreduce"]["comm_payload_bytes_per_rank_step"] == pytest.approx(grad)  # the model's size
    if "fp16" in seen:
        assert seen["fp16"]["comm_payload_bytes_per_rank_step"] == pytest.approx(grad / 2)
    assert seen["topk"]["comm_payload_bytes_per_rank_step"] < grad / 10  # compression really compresses
    for lossy in ("topk", "local_sgd", "ring"):
        assert "matches_serial" not in seen[lossy]  # reported (serial_max_abs_diff), not failed
    assert seen["topk"]["params_identical"] == "pass"  # every rank applies the same sparse update
    assert "params_identical" not in seen["ring"] and "replicas_identical" in seen["ring"]


def test_steps_to_target_loss_reads_the_mean_worker_loss_after_warmup() -> None:
    """The first timed step whose loss, averaged over the workers (a server has none), is at or
    below the target; the time is the slowest rank's, summed up to that step."""
    from d5pipe.levels.level3.quality import target_metrics

    ranks: list[dict[str, Any]] = [{"losses": [2.3, 2.2, 2.1, 1.7, 1.5], "times_s": [1.0, 1.0, 1.0, 1.0]},
             {"losses": [2.3, 1.8, 1.9, 2.1, 1.5], "times_s": [1.0, 2.0, 3.0, 1.0]},
             {"role": "server", "losses": [0.0] * 5, "times_s": [0.0] * 4}]
    (steps, seconds), note = target_metrics({"warmup_steps": 1}, ranks, 1.95)
    assert (steps.value, seconds.value, note) == (3.0, 6.0, None)  # (1.7 + 2.1) / 2; not rank 1 alone at step 1
    (steps, seconds), note = target_metrics({"warmup_steps": 1}, ranks, 1.0)
    assert [math.isnan(m.value) for m in (steps, seconds) if isinstance(m.value, float)] == [True, True]
    assert "never reached" in (note or "")


class _Board:
    """Where the rank threads of one :class:`_ThreadEngine` meet: each posts its tensor, all read all."""

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=60)
        self.posted: list[torch.Tensor] = [torch.empty(0)] * size

    def swap(self, rank: int, t: torch.Tensor) -> list[torch.Tensor]:
        self.posted[rank] = t.detach().clone()
        self.barrier.wait()
        out = list(self.posted)
        self.barrier.wait()  # nobody posts its next tensor before every rank has read this call's
        return out


class _ThreadEngine:
    """An engine whose ranks are threads of this process: it moves the tensors between them itself
    and tallies in ``handed`` the bytes of every tensor a rank hands it (once per receiving peer
    for point to point), a count of its own apart from the Communicator's ``counter``."""

    name = "threads"

    def __init__(self, board: _Board, rank: int, size: int) -> None:
        self.board, self.rank, self.size = board, rank, size
        self.counter = ByteCounter()
        self.handed = 0

    def _hand(self, t: torch.Tensor, copies: int = 1) -> list[torch.Tensor]:
        self.handed += copies * t.numel() * t.element_size()
        return self.board.swap(self.rank, t)

    def barrier(self) -> None:
        self.board.barrier.wait()

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        return t.copy_(torch.stack(self._hand(t)).sum(0))

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        return t.copy_(self._hand(t)[0])

    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat(self._hand(t))

    def exchange(self, t: torch.Tensor, peers: list[int]) -> list[torch.Tensor]:
        posted = self._hand(t, len(peers))
        return [posted[p].clone() for p in peers]

    def make_train_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        loss_fn: Callable[..., torch.Tensor]) -> StepFn:
        """The engine's own gradient allreduce (as mpi4py's: one flat buffer, counted by the engine)."""
        params = trainable(model)

        def average(step: int) -> None:
            flat = flat_grads(params)
            self.counter.add(flat)
            set_grads(params, self.allreduce(flat).div_(self.size))

        return plain_step(model, optimizer, loss_fn, average)

    def finalize(self) -> None:
        """Nothing to tear down."""


def _fp16() -> Strategy:
    from mypkg.strategy import FP16AllReduce  # examples/byo, on sys.path in the test

    strategy: Strategy = FP16AllReduce()
    return strategy


THREAD_STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "allreduce": AllReduce, "topk": TopK, "local_sgd": LocalSGD, "ring": RingAverage, "dpsgd": DPSGD, "fp16": _fp16}


def _handed_and_counted(make: Callable[[], Strategy], ranks: int) -> tuple[list[list[tuple[int, int]]], int, int]:
    """Each rank's ``(counted, handed)`` bytes per step of STEPS steps on threads, the gradient's
    bytes and its number of elements."""
    board = _Board(ranks)
    per_rank: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
    failed: list[BaseException] = []
    torch.manual_seed(0)
    model0 = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 4))

    def rank_main(rank: int) -> None:
        try:
            model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 4))
            engine = _ThreadEngine(board, rank, ranks)
            step = make().make_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                    torch.nn.CrossEntropyLoss(), Communicator(engine))
            engine.counter.reset()  # set-up (the parameter broadcast) is not per-step traffic
            engine.handed = 0
            gen = torch.Generator().manual_seed(rank)
            for _ in range(STEPS):
                step(torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen))
                per_rank[rank].append((engine.counter.reset()[0], engine.handed))
                engine.handed = 0
        except BaseException as exc:
            failed.append(exc)
            board.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    params = trainable(model0)
    return per_rank, sum(p.numel() * p.element_size() for p in params), sum(p.numel() for p in params)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("strategy", sorted(THREAD_STRATEGIES))
def test_counted_and_expected_bytes_are_the_bytes_handed_to_the_engine(
        strategy: str, ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Light and without launched ranks: the ranks are threads of an engine that moves the
    tensors itself and tallies what each rank hands it. Every step, the Communicator's counter is
    what reached the engine; the strategy's formula is what reached it on average; the sizes the
    test knows independently hold: the whole gradient for allreduce, half for float16, under a tenth
    for top-k."""
    user_code_for_ranks(monkeypatch, "mypkg", EXAMPLE)
    per_rank, grad_bytes, n = _handed_and_counted(THREAD_STRATEGIES[strategy], ranks)
    for rank, steps in enumerate(per_rank):
        assert len(steps) == STEPS
        assert [c for c, _ in steps] == [h for _, h in steps], (rank, steps)  # counted = handed over
        handed = sum(h for _, h in steps) / STEPS
        expected = THREAD_STRATEGIES[strategy]().expected_bytes(grad_bytes, n, ranks, range(STEPS), "threads")
        assert handed == pytest.approx(expected), (rank, handed, expected)
        known = {"allreduce": grad_bytes, "fp16": grad_bytes / 2, "ring": grad_bytes * min(2, ranks - 1),
                 "dpsgd": grad_bytes * min(2, ranks - 1), "local_sgd": grad_bytes * 2 / STEPS}
        if strategy in known:
            assert handed == pytest.approx(known[strategy]), (rank, handed)
        else:
            assert 0 < handed < grad_bytes / 10  # top-k: compression really compresses
