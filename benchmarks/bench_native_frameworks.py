"""d5pipe's training step on each framework against the same network written in that framework's
own idiom, independent of d5pipe's translation (issue #59).

d5pipe's side is a level-2 framework point's path (d5pipe.levels.level2.framework_point): the
model traced once, the float64 check against PyTorch's float64 reference on the first
``--check-steps`` batches (in the same process, before the timed run, as the point runs it), then
the float32 framework prepared and ``framework.step(x, y)`` timed on the numpy batch. The native
side is what a user of that framework writes:

* ``torch``: a bare loop over the same torch module (``torch.optim.SGD``, ``cross_entropy``,
  ``loss.item()``); ``compile``: the same loop over ``torch.compile`` of that module;
* ``jax`` / ``tensorflow``: Keras 3's model of the network (``weights=None``, logits out,
  ``SparseCategoricalCrossentropy(from_logits=True)``, ``keras.optimizers.SGD``) on that backend,
  ``train_on_batch`` on NHWC batches (the backend is chosen per process by ``KERAS_BACKEND``).

The networks (benchmarks/native_networks.py), each side's parameter count checked:
``--model resnet50``: Keras's ``keras.applications.ResNet50``, and in torch d5pipe's ResNet-50 in
that layout (v1; ``--network d5pipe``: d5pipe's own, v1.5, as ``train_frameworks`` runs it);
``--model vit_b16``: d5pipe's built-in ``vit_b16`` (transformers' ViTForImageClassification, traced
with its attention, GELU and class token into d5pipe's layers), and keras_hub's
``ViTImageClassifier`` (or, without keras_hub, the same ViT in plain Keras 3 layers:
``MultiHeadAttention``, ``LayerNormalization``, ``Dense``, a ``Conv2D`` patch embedding).

Both sides: the same batch (4), 224x224 images, 1000 classes, SGD momentum 0.9 (lr 0.01), float32,
the same thread pins (torch ``set_num_threads``; TensorFlow's intra/inter-op pools; XLA_FLAGS as
d5pipe's JAX framework sets them, handed to the native JAX side too; ``OMP_NUM_THREADS``), the same
generated batches, warm-up steps, then ``--steps`` steps each timed on ``perf_counter_ns`` (the loss
fetched, so the step is done). Each side of each framework runs in a fresh process per round; the
rounds interleave the sides in time (a random order of frameworks and of the two sides per round,
Abedi & Brecht). A process's value is its fastest step, as d5pipe's comparisons take it (a shared
machine's noise only adds time: d5pipe.results.repetition_values.fastest_sample). Printed per
framework and thread count: each side's step (median over the rounds) and the ratio d5pipe /
native -- the median of the per-round ratios, with its nonparametric CI
(d5pipe.measure.stats.median_ci; with 5 rounds it is [min, max] at 94% coverage) -- and the
float64 check's verdict on d5pipe's side. The target is every ratio within 1.10.
``--baseline-src`` runs another d5pipe tree (main's ``src/``) as a third side in the same rounds,
so a before/after shares the machine's load; ``--json`` keeps every process's raw steps.

``--quick``: 32x32 images (``--vit tiny`` for the ViT), one round of two steps: that it runs.
keras_hub is no dependency of d5pipe; to time its ViT, put it on the path of this benchmark alone
(``pip install --no-deps --target DIR keras-hub``, ``PYTHONPATH=DIR``: it needs nothing more for
its ViT than Keras and what Keras needs).

Usage: python benchmarks/bench_native_frameworks.py [--threads 1,2] [--rounds 5] [--steps 8]
       [--frameworks torch,jax,tensorflow] [--model resnet50|vit_b16] [--vit b16|tiny] [--quick]
       [--baseline-src /path/to/main/src] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from native_networks import VIT, keras_network, torch_network

LR, MOMENTUM = 0.01, 0.9
DISTINCT_BATCHES = 2


def xla_flags(threads: int) -> str:
    """The XLA_FLAGS d5pipe's JAX framework sets for ``threads`` (d5pipe.levels.level2.frameworks.jax_framework)."""
    eigen = "true" if threads > 1 else "false"
    return f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={threads}"


def batches(a: argparse.Namespace) -> list[tuple[np.ndarray, np.ndarray]]:
    """The generated NCHW float32 batches both sides train on (the native Keras side gets them NHWC)."""
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((a.batch, 3, a.image, a.image)).astype(np.float32),
             rng.integers(0, a.classes, a.batch)) for _ in range(DISTINCT_BATCHES)]


def timed(step: Callable[[int], float], a: argparse.Namespace) -> tuple[list[float], list[float], list[float]]:
    """Losses of every step, and wall and process CPU times of the steps after the warm-up (the CPU
    time shows what a loaded machine's time-sharing added to the wall time), cycling over the batches."""
    losses, times, cpu = [], [], []
    for i in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        losses.append(float(step(i % DISTINCT_BATCHES)))
        if i >= a.warmup:
            times.append((time.perf_counter_ns() - t0) * 1e-9)
            cpu.append((time.process_time_ns() - c0) * 1e-9)
    return losses, times, cpu


def d5pipe_side(a: argparse.Namespace) -> dict[str, Any]:
    """A framework point's path: the float64 check, then the float32 framework's timed steps."""
    from d5pipe.levels.instantiate import build
    from d5pipe.levels.level2.frameworks import FRAMEWORKS
    from d5pipe.levels.level2.frameworks.agreement import check, prepare, run_steps
    from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
    from d5pipe.levels.level2.frameworks.torch_framework import TorchFramework
    from d5pipe.levels.level2.frameworks.trace import initial_weights, trace
    from d5pipe.levels.verify import max_relative_difference

    model = torch_network(a)
    graph = trace(model, (a.batch, 3, a.image, a.image))
    w0 = initial_weights(model, graph)
    data = batches(a)
    spec = OptimizerSpec("sgd", LR, momentum=MOMENTUM)
    import d5pipe

    out: dict[str, Any] = {"d5pipe": os.path.dirname(d5pipe.__file__)}
    reference = None
    if a.check_steps:
        first = [data[i % DISTINCT_BATCHES] for i in range(a.check_steps)]
        reference = run_steps(TorchFramework(model, dtype="float64"), graph, w0, spec, first, a.threads)
        steps = run_steps(build(FRAMEWORKS[a.framework].target({}), a.framework, offered={"model": model, "dtype": "float64"}), graph, w0, spec, first, a.threads)
        agreement = check(steps, reference, w0, graph, "float64")
        out["check"] = {"float64_passed": agreement.passed, "update_rel_l2": agreement.update_rel_l2,
                        "loss_rel_err": agreement.loss_rel_err}
    fw = build(FRAMEWORKS[a.framework].target({}), a.framework, offered={"model": model, "dtype": "float32"})
    out["told"], out["compile_s"] = prepare(fw, graph, w0, spec, data[0], a.threads)
    losses, out["step_s"], out["step_cpu_s"] = timed(lambda i: fw.step(*data[i]), a)
    if reference is not None:
        out["check"]["float32_first_loss_rel_err"] = max_relative_difference(losses[:1], reference.losses[:1])
    return out


def native_side(a: argparse.Namespace) -> dict[str, Any]:
    """The framework's own idiom: a bare torch loop, or Keras 3's model on the backend."""
    data = batches(a)
    if a.framework in ("torch", "compile"):
        import torch

        model = torch_network(a).train()
        forward = torch.compile(model) if a.framework == "compile" else model
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        tensors = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]

        def torch_step(i: int) -> float:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(forward(tensors[i][0]), tensors[i][1])
            loss.backward()
            opt.step()
            return loss.item()

        t0 = time.perf_counter()
        if a.framework == "compile":  # compiled by a first step (its update is kept: weights' values do not time)
            torch_step(0)
        torch_told = {"threads": torch.get_num_threads(), "loop": "bare torch loop over the same module"}
        compile_s = time.perf_counter() - t0
        losses, step_s, cpu_s = timed(torch_step, a)
        return {"told": torch_told, "compile_s": compile_s, "step_s": step_s, "step_cpu_s": cpu_s}
    told: dict[str, Any] = {"KERAS_BACKEND": os.environ.get("KERAS_BACKEND")}
    if a.framework == "tensorflow":
        import tensorflow as tf
        from tensorflow.python.util import _pywrap_util_port

        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
        told["onednn"] = bool(_pywrap_util_port.IsMklEnabled())
    else:
        told["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    import keras

    model, what = keras_network(a)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=None)
    nhwc = [(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), y) for x, y in data]
    t0 = time.perf_counter()
    model.train_on_batch(*nhwc[0])  # traces and compiles (its update is kept: weights' values do not time)
    compile_s = time.perf_counter() - t0
    told |= {"keras": keras.__version__, "jit_compile": bool(model.jit_compile), "model": what}
    losses, step_s, cpu_s = timed(lambda i: model.train_on_batch(*nhwc[i]), a)
    return {"told": told, "compile_s": compile_s, "step_s": step_s, "step_cpu_s": cpu_s}


def run_side(side: str, framework: str, threads: int, a: argparse.Namespace) -> dict[str, Any]:
    """One side in a fresh process, with the environment both sides share (``baseline``: d5pipe's
    side from the ``--baseline-src`` tree)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("KERAS_BACKEND", None)
    if side == "native" and framework in ("jax", "tensorflow"):
        env["KERAS_BACKEND"] = framework
        if framework == "jax":
            env.setdefault("XLA_FLAGS", xla_flags(threads))
    if side == "baseline":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [a.baseline_src, env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--worker", "native" if side == "native" else "d5pipe", "--framework", framework,
           "--threads", str(threads), "--image", str(a.image), "--batch", str(a.batch), "--classes", str(a.classes),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--check-steps", str(a.check_steps),
           "--network", a.network, "--model", a.model, "--vit", a.vit]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{side} {framework} (threads {threads}) exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("resnet50", "vit_b16"), default="resnet50")
    ap.add_argument("--frameworks", default="torch,jax,tensorflow", help="of torch, compile, jax, tensorflow")
    ap.add_argument("--threads", default="1", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check-steps", type=int, default=1, help="d5pipe's float64 check before the timed run (0: none)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="of the random order of the sides")
    ap.add_argument("--vit", choices=tuple(VIT), default="b16", help="the ViT's size (--model vit_b16)")
    ap.add_argument("--quick", action="store_true", help="32x32 images (a tiny ViT), 1 round of 2 steps: "
                                                         "checks that it runs")
    ap.add_argument("--baseline-src", help="another d5pipe source tree (e.g. main's src/) timed as a third side, "
                                           "'baseline', in the same interleaved rounds: a before/after")
    ap.add_argument("--json", help="write every process's raw result here")
    ap.add_argument("--network", choices=("keras", "d5pipe"), default="keras",
                    help="the torch network of d5pipe's side and the bare loop: Keras's ResNet-50 layout (v1), or "
                         "d5pipe's own (v1.5, what train_frameworks runs; about 6%% more work than Keras's side)")
    ap.add_argument("--worker", choices=("d5pipe", "native"), help=argparse.SUPPRESS)
    ap.add_argument("--framework", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.threads = int(a.threads)
        print("RESULT " + json.dumps((d5pipe_side if a.worker == "d5pipe" else native_side)(a)), flush=True)
        return 0
    if a.quick:
        a.image, a.rounds, a.steps, a.warmup, a.vit = 32, 1, 2, 1, "tiny"
    from d5pipe.measure.stats import median_ci

    frameworks = a.frameworks.split(",")
    sides = ["d5pipe", "native"] + (["baseline"] if a.baseline_src else [])
    rng = random.Random(a.seed)
    network = (f"ViT ({a.vit}: width, layers, heads, MLP, patch {VIT[a.vit]})" if a.model == "vit_b16"
               else f"ResNet-50 ({a.network}'s layout on d5pipe's and torch's sides)")
    print(f"{network}, batch {a.batch}, {a.image}x{a.image}, {a.classes} classes, SGD momentum {MOMENTUM}, float32; "
          f"{a.rounds} round(s) of a fresh process per side, {a.warmup} warm-up + {a.steps} timed steps each; "
          f"a process's value is its fastest step")
    raw: dict[str, Any] = {"args": vars(a), "runs": []}
    for threads in (int(t) for t in a.threads.split(",")):
        got: dict[str, dict[str, list[dict[str, Any]]]] = {f: {s: [] for s in sides} for f in frameworks}
        for r in range(a.rounds):
            for f in rng.sample(frameworks, len(frameworks)):
                for side in rng.sample(sides, len(sides)):
                    got[f][side].append(run_side(side, f, threads, a))
                    raw["runs"].append({"threads": threads, "round": r, "framework": f, "side": side,
                                        **got[f][side][-1]})
                    print(f"  [{threads} thread(s), round {r + 1}/{a.rounds}] {f} {side}: fastest step "
                          f"{min(got[f][side][-1]['step_s']):.3f} s", file=sys.stderr, flush=True)
        print(f"\n{threads} thread(s)")
        print(f"{'framework':<11} {'side':<9} {'step':>8} {'native':>8} {'side/native':>12} {'CI (coverage)':>24}"
              f"  within 1.10  float64 check")
        for f in frameworks:
            fastest = {s: [min(r["step_s"]) for r in got[f][s]] for s in sides}
            for side in (s for s in sides if s != "native"):
                ratios = [d / n for d, n in zip(fastest[side], fastest["native"])]
                ci = median_ci(ratios)
                within = "yes" if ci.high <= 1.10 else ("no" if ci.low > 1.10 else "?")
                shown = f"[{ci.low:.3f}, {ci.high:.3f}] ({ci.coverage:.0%})" if len(ratios) > 1 else "(one round)"
                checks: list[Any] = [r.get("check") for r in got[f][side]]
                said = "not run" if not checks[0] else (
                    ("pass" if all(c["float64_passed"] for c in checks) else "FAIL")
                    + f" (update {max(c['update_rel_l2'] for c in checks):.1e}, "
                      f"float32 first loss {max(c['float32_first_loss_rel_err'] for c in checks):.1e})")
                print(f"{f:<11} {side:<9} {statistics.median(fastest[side]):>7.3f}s "
                      f"{statistics.median(fastest['native']):>7.3f}s {statistics.median(ratios):>12.3f} {shown:>24}"
                      f"  {within:<11}  {said}")
        for f in frameworks:
            comp = {s: statistics.median(r["compile_s"] for r in got[f][s]) for s in sides}
            print(f"  {f}: compile " + ", ".join(f"{v:.1f} s ({s})" for s, v in comp.items())
                  + f"; d5pipe told {json.dumps(got[f]['d5pipe'][-1]['told'], default=str)}; "
                  f"native {json.dumps(got[f]['native'][-1]['told'])}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(raw, fh, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
