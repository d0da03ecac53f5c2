"""d5pipe's timing of a training framework's step against a bare loop of that framework over the
same compiled step and batch.

For each framework of ``train.framework`` (PyTorch eager, JAX, TensorFlow; optionally torch.compile)
one network is traced and prepared once, as a level-2 framework point prepares it
(d5pipe.levels.level2.framework_point), and then, interleaved over rounds in a random order per
round: d5pipe's step -- ``framework.step(x, y)`` on the numpy batch, timed on ``perf_counter_ns``
as the framework loop times it -- and the framework's own loop over the same compiled step and the
same numpy batch, handed over the framework's own way as a plain loop would (PyTorch:
``torch.from_numpy``, zero_grad, forward, backward, step, ``loss.item()``; JAX: the numpy arrays
into the compiled executable, ``block_until_ready`` of the loss; TensorFlow: ``tf.constant`` into
the ``tf.function``, ``.numpy()`` of the loss). Both sides keep training the same weights. Prints each
framework's median step time both ways and the ratio d5pipe / bare (median of the per-round ratios
of the two sides' median step times, with its 95% CI). The target is a ratio within 3%.

Usage: python benchmarks/bench_train_framework_overhead.py [--model cnn|resnet] [--rounds 15]
       [--steps 10] [--batch 64] [--frameworks torch,jax,tensorflow] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from d5pipe.levels.instantiate import build
from d5pipe.levels.level2.frameworks import FRAMEWORKS
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
from d5pipe.levels.level2.frameworks.trace import initial_weights, trace
from d5pipe.levels.models import build_model
from d5pipe.measure.stats import median_ci


def bare_step(fw: Any, x: np.ndarray, y: np.ndarray) -> Callable[[], object]:
    """The framework's own training step on the batch already in its tensors."""
    if fw.name in ("torch", "compile"):
        def torch_step() -> object:
            xt, yt = torch.from_numpy(x), torch.from_numpy(y)
            fw.optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(fw.forward(xt), yt)
            loss.backward()
            fw.optimizer.step()
            return loss.item()

        return torch_step
    if fw.name == "jax":
        y32 = y.astype(np.int32)  # the label type the step was compiled for

        def jax_step() -> object:
            fw.params, fw.buffers, fw.state, loss = fw.compiled_step(fw.params, fw.buffers, fw.state, x, y32)
            return loss.block_until_ready()

        return jax_step
    return lambda: fw.train_step(*fw.tensors(x, y)).numpy()


def d5pipe_step(fw: Any, x: np.ndarray, y: np.ndarray) -> Callable[[], object]:
    """The framework loop's step: the numpy batch handed to ``framework.step``."""
    return lambda: fw.step(x, y)


def median_step(fn: Callable[[], object], steps: int) -> float:
    """Median of ``steps`` single-step times on perf_counter_ns (as the framework loop times a step)."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) * 1e-9)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("cnn", "resnet"), default="cnn")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--frameworks", default="torch,jax,tensorflow")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "cnn":
        shape, classes = (1, 8, 8), 10
        model = build_model({"name": "cnn", "channels": 16, "blocks": 2}, shape, classes)
    else:
        shape, classes = (3, 224, 224), 1000
        model = build_model({"name": "resnet", "depth": 50}, shape, classes)
    graph = trace(model, (args.batch, *shape))
    w0 = initial_weights(model, graph)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, *shape)).astype(np.float32)
    y = rng.integers(0, classes, args.batch)
    spec = OptimizerSpec("sgd", 0.01, momentum=0.9)
    print(f"{args.model}, batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds of {args.steps} steps a side")
    print(f"{'framework':<11} {'d5pipe step':>12} {'bare step':>12} {'d5pipe/bare':>12} {'95% CI':>18}  within 3%")
    worst = 0.0
    for name in args.frameworks.split(","):
        fw = build(FRAMEWORKS[name].target({}), name, offered={"model": model, "dtype": "float32"})
        fw.prepare(graph, w0, spec, (x, y), args.threads)
        sides: dict[str, Callable[[], object]] = {"d5pipe": d5pipe_step(fw, x, y), "bare": bare_step(fw, x, y)}
        for fn in sides.values():  # warm both paths
            median_step(fn, 2)
        ratios: list[float] = []
        medians: dict[str, list[float]] = {"d5pipe": [], "bare": []}
        for _ in range(args.rounds):
            order = list(sides)
            random.shuffle(order)
            got = {side: median_step(sides[side], args.steps) for side in order}
            ratios.append(got["d5pipe"] / got["bare"])
            for side, v in got.items():
                medians[side].append(v)
        r, ci = statistics.median(ratios), median_ci(ratios)
        lo, hi = ci.low, ci.high
        ok = abs(r - 1) <= 0.03
        worst = max(worst, abs(r - 1))
        print(f"{name:<11} {statistics.median(medians['d5pipe']) * 1e3:>10.3f}ms {statistics.median(medians['bare']) * 1e3:>10.3f}ms"
              f" {r:>12.4f} {f'[{lo:.4f}, {hi:.4f}]':>18}  {'yes' if ok else 'NO'}")
    print(f"largest |ratio - 1|: {worst:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
