"""Each framework's level-0 call against a bare loop written in that framework (#59 item 3).

For every framework of ``operators.framework`` (d5pipe.levels.level0.frameworks) and each operator
asked for, the call a level-0 point times is built as the point builds it (the seeded inputs
rounded to the dtype, the framework's engine, its form of the built-in, the arrays made once) and
timed by ``d5pipe.measure.timer.measure``; beside it, the same operator written the way that
framework's users write it, independently of d5pipe (``torch.matmul``; ``jax.jit(jnp.matmul)`` and
``block_until_ready``; ``tf.linalg.matmul(...).numpy()``; an ``InferenceSession`` of a one-node
graph and ``session.run``), on arrays of the same shapes and dtype, timed by a bare
``time.perf_counter`` loop: blocks of as many back-to-back calls as d5pipe's timer put in a block
in that round, the median of the blocks' per-call times (the same estimator on both sides), each call
made at the same depth of the Python stack as d5pipe's timer makes it: TensorFlow's eager executor
captures the caller's Python stack at every op (``SetStackTrace(GetStackTrace(kStackTraceInitialSize))``
in ``TFE_Py_Execute``), so one op costs more the deeper its caller sits, up to that limit (tf.nn.softmax
on a 64x64 tensor: 9.5 us called 2 frames deep, 9.9 us 10 or 40 deep, 2026-12-07) -- a loop at a
script's top level would otherwise win by that alone. The
two sides take turns in a seeded random order each round (interleaved, so drift favours neither).
Prints each pair's median per-call time both ways and the ratio d5pipe / bare (median of the
per-round ratios with its nonparametric 95% CI). The goal: every ratio within 5% of 1.

Usage: python benchmarks/bench_level0_frameworks.py [--rounds 11] [--ops matmul,conv2d,softmax]
       [--size 64] [--batch 1] [--threads 1] [--frameworks torch,jax,tensorflow,onnxruntime]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from d5pipe.levels.level0.frameworks import FRAMEWORKS, NAMES
from d5pipe.levels.level0.operators import BUILTIN_SPECS
from d5pipe.measure.stats import median_ci
from d5pipe.measure.timer import measure

TIMER = {"warmup_s": 0.05, "min_block_s": 0.01, "budget_s": 0.3, "target_ci_pct": 1.0}
GOAL = 0.05


def _bare(fn: Callable[[], object], reps: int, seconds: float) -> float:
    """Median per-call time of blocks of ``reps`` back-to-back calls, blocks for about ``seconds``."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def _depth() -> int:
    """How many frames deep the caller of this function sits on the Python stack."""
    frame: FrameType | None = sys._getframe(1)
    n = 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def at_depth(depth: int, run: Callable[[], float]) -> float:
    """``run()`` called so that its own frame is ``depth`` frames deep (or as deep as it already is);
    a ``functools.partial`` adds no frame of its own."""
    return at_depth(depth, run) if _depth() + 1 < depth else run()


def bare_torch(op: str, xs: list[np.ndarray], dtype: str) -> Callable[[], object]:
    a = [torch.from_numpy(x).to(getattr(torch, dtype)) for x in xs]
    fns: dict[str, Callable[[], object]] = {
        "matmul": lambda: torch.matmul(a[0], a[1]),
        "conv2d": lambda: F.conv2d(a[0], a[1], padding=1),
        "softmax": lambda: torch.softmax(a[0], dim=-1),
    }
    return fns[op]


def bare_jax(op: str, xs: list[np.ndarray], dtype: str) -> Callable[[], object]:
    import jax
    import jax.numpy as jnp

    dt = np.dtype(getattr(jnp, dtype))
    if op == "matmul":
        f, a = jax.jit(jnp.matmul), [jax.device_put(x.astype(dt)) for x in xs]
    elif op == "conv2d":
        f = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                              dimension_numbers=("NHWC", "HWIO", "NHWC")))
        a = [jax.device_put(np.transpose(xs[0], (0, 2, 3, 1)).astype(dt)),
             jax.device_put(np.transpose(xs[1], (2, 3, 1, 0)).astype(dt))]
    else:
        f, a = jax.jit(lambda x: jax.nn.softmax(x, axis=-1)), [jax.device_put(xs[0].astype(dt))]
    f(*a).block_until_ready()
    return lambda: f(*a).block_until_ready()


def bare_tensorflow(op: str, xs: list[np.ndarray], dtype: str) -> Callable[[], object]:
    import tensorflow as tf

    dt = getattr(tf, dtype)
    if op == "matmul":
        a, b = (tf.constant(x, dtype=dt) for x in xs)
        return lambda: tf.linalg.matmul(a, b).numpy()
    if op == "conv2d":
        x = tf.constant(np.transpose(xs[0], (0, 2, 3, 1)), dtype=dt)
        w = tf.constant(np.transpose(xs[1], (2, 3, 1, 0)), dtype=dt)
        return lambda: tf.nn.conv2d(x, w, 1, "SAME").numpy()
    s = tf.constant(xs[0], dtype=dt)
    return lambda: tf.nn.softmax(s, axis=-1).numpy()


def bare_onnxruntime(op: str, xs: list[np.ndarray], dtype: str) -> Callable[[], object]:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}[dtype]
    names = [f"in{i}" for i in range(len(xs))]
    node = {"matmul": helper.make_node("MatMul", names, ["out"]),
            "conv2d": helper.make_node("Conv", names, ["out"], pads=[1, 1, 1, 1]),
            "softmax": helper.make_node("Softmax", names, ["out"], axis=-1)}[op]
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, elem, list(x.shape))
                                           for n, x in zip(names, xs, strict=True)],
                              [helper.make_tensor_value_info("out", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {n: x.astype(dtype) for n, x in zip(names, xs, strict=True)}
    return lambda: session.run(None, feed)


BARE: dict[str, Callable[[str, list[np.ndarray], str], Callable[[], object]]] = {
    "torch": bare_torch, "jax": bare_jax, "tensorflow": bare_tensorflow, "onnxruntime": bare_onnxruntime,
}


def level0_call(framework: str, op: str, size: int, batch: int, dtype: str, engines: dict[str, Any]
                ) -> tuple[Callable[[], object], list[np.ndarray], Any]:
    """The call a level-0 point times, its inputs (float64, PyTorch's layout) and the context it needs."""
    spec = BUILTIN_SPECS[op]
    assert spec.make_inputs is not None and spec.forward is not None
    rounded = [t.to(getattr(torch, dtype)) for t in spec.make_inputs(size, batch, torch.Generator().manual_seed(0))]
    arrays = [t.to(torch.float64).numpy() for t in rounded]
    declared = FRAMEWORKS[framework]
    if declared.engine is None:  # PyTorch: level 0's own path calls the spec's forward on the tensors
        forward = spec.forward
        return (lambda: forward(*rounded)), arrays, None
    engine = engines.setdefault(framework, declared.engine(torch.get_num_threads()))
    native = engine.builtin(op)
    session = engine.session(dtype)
    session.__enter__()
    return engine.prepare(native, arrays, dtype).call, arrays, session


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--ops", default="matmul,conv2d,softmax")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--frameworks", default=",".join(NAMES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    order = random.Random(args.seed)
    engines: dict[str, Any] = {}
    seen: list[int] = []  # how deep measure, called from here, calls what it times (the last: a block)
    measure(lambda: seen.append(_depth()), {"warmup_s": 1e-3, "min_block_s": 1e-3, "budget_s": 1e-3}, "cpu")
    worst, widest = 0.0, 0.0
    for framework in args.frameworks.split(","):
        for op in args.ops.split(","):
            call, arrays, session = level0_call(framework, op, args.size, args.batch, args.dtype, engines)
            bare = BARE[framework](op, arrays, args.dtype)
            reps = measure(call, TIMER, "cpu").calls_per_block  # warms both; the block size d5pipe picks
            bare()
            ratios, d5, bb = [], [], []
            for _ in range(args.rounds):
                sides = ["d5pipe", "bare"]
                order.shuffle(sides)
                for side in sides:
                    if side == "d5pipe":
                        m = measure(call, TIMER, "cpu")
                        reps = m.calls_per_block
                    else:  # _bare, then the callable: as deep as measure's calls
                        b = at_depth(seen[-1] - 1, partial(_bare, bare, reps, TIMER["budget_s"]))
                d5.append(m.median)
                bb.append(b)
                ratios.append(m.median / b)
            if session is not None:
                session.__exit__(None, None, None)
            ci = median_ci(ratios, 0.95)
            ratio = statistics.median(ratios)
            worst = max(worst, abs(ratio - 1.0))
            widest = max(widest, ratio - ci.low, ci.high - ratio)
            print(f"{framework:12s} {op:8s} d5pipe {statistics.median(d5) * 1e6:9.1f} us  bare "
                  f"{statistics.median(bb) * 1e6:9.1f} us  ratio {ratio:.4f} [{ci.low:.4f}, {ci.high:.4f}] "
                  f"over {args.rounds} rounds", flush=True)
    ok = worst <= GOAL and math.isfinite(worst)
    print(f"largest |ratio - 1|: {worst:.2%} ({'PASS' if ok else 'FAIL'}: goal {GOAL:.0%}, on the medians); the CIs "
          f"are up to ±{widest:.1%} wide (size {args.size}, batch {args.batch}, {args.dtype}, {args.threads} thread(s))")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
