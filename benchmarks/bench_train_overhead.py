"""d5pipe's training step vs a bare PyTorch loop: same model, batch, data and optimizer, one process.

For each model (MLP and the residual CNN on sklearn digits, batch 64, Adam), rounds alternate
(the order flips every round) between

* ``d5pipe``: ``d5pipe.levels.level2.train_loop.train_epoch`` (seeded index batches, per-step timing marks,
  loss/prediction bookkeeping reduced once per epoch, one JSONL line per step written after each
  epoch), and
* ``bare``: the loop a user would write: ``randperm`` + slicing, zero_grad/forward/loss/backward/step,

each timed from outside with ``time.perf_counter`` over ``--epochs`` epochs and divided by the
number of steps. Both start from identical initial weights. It prints every round's time per step,
the median over rounds of each, the ratio of the medians (d5pipe / bare; 1.00 = no overhead) and
the median of the per-round ratios with its 95% confidence interval (order statistics).
It also prints ``run_point`` wall time per step for the same epochs (setup, evaluation after each
epoch, weight checksum included) for scale; that is not part of the ratio.

Usage: python benchmarks/bench_train_overhead.py [--rounds 41] [--epochs 1] [--threads N] [--models mlp,cnn]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from d5pipe.levels.contract import PointContext
from d5pipe.levels.datasets import Dataset, load_for
from d5pipe.levels.level2.point import resolve_train, run_point
from d5pipe.levels.level2.train_loop import StepLog, make_loader, train_epoch
from d5pipe.levels.models import build_model
from d5pipe.levels.optim import make_optimizer
from d5pipe.measure.determinism import seed_everything
from d5pipe.measure.stats import median_ci

MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"name": "mlp", "hidden": [128]},
    "cnn": {"name": "cnn", "channels": 16, "blocks": 2},
}
BATCH = 64
LR = 1e-3


def d5pipe_loop(model: nn.Module, data: Dataset, epochs: int, log_path: Path) -> tuple[float, int]:
    """Seconds and steps of ``epochs`` epochs through d5pipe's training loop."""
    conf = resolve_train({"optimizer": "adam", "lr": LR, "batch_size": BATCH, "epochs": epochs})
    opt = make_optimizer(dataclasses.asdict(conf), model.parameters())
    loader = make_loader(data.x_train, data.y_train, BATCH, seed=0)
    device = torch.device("cpu")
    steps = 0
    with StepLog(log_path) as log:
        start = time.perf_counter()
        for epoch in range(1, epochs + 1):
            stats = train_epoch(model, loader, opt, device, epoch, log, steps)
            steps += len(stats.step_times_s)
        elapsed = time.perf_counter() - start
    return elapsed, steps


def bare_loop(model: nn.Module, data: Dataset, epochs: int) -> tuple[float, int]:
    """Seconds and steps of ``epochs`` epochs of a plain PyTorch loop."""
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    x, y = data.x_train, data.y_train
    steps = 0
    model.train()
    start = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), BATCH):
            idx = perm[i : i + BATCH]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            steps += 1
    elapsed = time.perf_counter() - start
    return elapsed, steps


def point_per_step(model_cfg: dict[str, Any], data_dir: Path, work: Path, epochs: int) -> float:
    cfg = {"name": "bench", "seed": 0, "model": model_cfg, "dataset": {"name": "digits"},
           "train": {"optimizer": "adam", "lr": LR, "batch_size": BATCH, "epochs": epochs}, "timer": {}}
    ctx = PointContext("bench", "level2", "p", {}, cfg, 1, work, work / "point", data_dir, {})
    start = time.perf_counter()
    out = run_point(ctx)
    elapsed = time.perf_counter() - start
    steps = next(m.value for m in out.metrics if m.name == "train_steps")
    assert isinstance(steps, int)
    return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = leave)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = load_for({"name": "digits"}, work / "data")
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, digits train "
              f"{len(data.y_train)} samples, batch {BATCH}, Adam, {args.epochs} epoch(s) per round, "
              f"{args.rounds} rounds")
        for name in args.models.split(","):
            model_cfg = MODELS[name]
            seed_everything(0)
            init = build_model(model_cfg, data.input_shape, data.n_classes)
            # warm-up both loops once (allocator, oneDNN primitives)
            d5pipe_loop(copy.deepcopy(init), data, 1, work / "warm.jsonl")
            bare_loop(copy.deepcopy(init), data, 1)
            d5_times: list[float] = []
            bare_times: list[float] = []
            for r in range(args.rounds):
                order = ("d5pipe", "bare") if r % 2 == 0 else ("bare", "d5pipe")
                for which in order:
                    model = copy.deepcopy(init)
                    if which == "d5pipe":
                        s, n = d5pipe_loop(model, data, args.epochs, work / f"{name}-{r}.jsonl")
                        d5_times.append(s / n)
                    else:
                        s, n = bare_loop(model, data, args.epochs)
                        bare_times.append(s / n)
                if args.rounds <= 15:
                    print(f"  {name} round {r}: d5pipe {1e3 * d5_times[-1]:.3f} ms/step, "
                          f"bare {1e3 * bare_times[-1]:.3f} ms/step")
            d5_med, bare_med = statistics.median(d5_times), statistics.median(bare_times)
            point = point_per_step(model_cfg, work / "data", work / name, args.epochs)
            # rounds are pairs run back to back: the median of the per-round ratios, with its
            # order-statistic 95% CI, is robust to the machine drifting between rounds
            ratios = [a / b for a, b in zip(d5_times, bare_times, strict=True)]
            ci = median_ci(ratios)
            print(f"{name}: median d5pipe {1e3 * d5_med:.3f} ms/step, bare {1e3 * bare_med:.3f} ms/step, "
                  f"ratio of medians d5pipe/bare = {d5_med / bare_med:.3f}; "
                  f"median per-round ratio {statistics.median(ratios):.3f} (95% CI {ci.low:.3f}..{ci.high:.3f}); "
                  f"whole run_point {1e3 * point:.3f} ms/step")


if __name__ == "__main__":
    main()
