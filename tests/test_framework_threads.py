"""TensorFlow and XLA fix their thread pools once per process (d5pipe.levels.framework_threads): in
one process, as a shard's worker runs its points, a point that asks for other threads than an earlier
point fixed is a ``failed`` record that says so (level 0's engines and level 2's frameworks alike),
and points at the same threads pass. Each sequence runs in a fresh process: the pytest process's own
pools are the tests' FRAMEWORK_THREADS (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

TIMER = {"warmup_s": 0.005, "warmup_max_iters": 2, "min_block_s": 0.001, "budget_s": 0.02,
         "min_samples": 3, "max_samples": 10, "target_ci_pct": 50.0}


def points_in_one_process(counts: str) -> list[dict[str, Any]]:
    """In this process: per thread count of ``counts`` (``"2,1"``), a level-0 TensorFlow and a JAX
    matmul point through the shard's record (one engine cache, as a worker keeps it); then level 2's
    TensorFlow and JAX frameworks at the last count, two steps of a small MLP. What each gave."""
    import tempfile
    from pathlib import Path

    import numpy as np
    import torch

    from d5pipe.execute.shard import run_point_record
    from d5pipe.levels.contract import PointContext
    from d5pipe.levels.framework_threads import ThreadsFixed
    from d5pipe.levels.level0.point import run_point
    from d5pipe.levels.level2.frameworks.agreement import run_steps
    from d5pipe.levels.level2.frameworks.contract import OptimizerSpec
    from d5pipe.levels.level2.frameworks.jax_framework import JaxFramework
    from d5pipe.levels.level2.frameworks.tf_framework import TensorFlowFramework
    from d5pipe.levels.level2.frameworks.trace import initial_weights, trace
    from d5pipe.levels.models import mlp

    out: list[dict[str, Any]] = []
    cache: dict[str, Any] = {}
    threads = [int(n) for n in counts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for n in threads:
            torch.set_num_threads(n)  # a worker's threads: its OMP_NUM_THREADS
            for fw in ("tensorflow", "jax"):
                ops = {"op": "matmul", "size": 8, "batch": 2, "peak": False, "time_backward": False, "framework": fw}
                ctx = PointContext(experiment="x", stage="level0", point_id=f"{fw}-{n}", params={},
                                   config={"operators": ops, "timer": TIMER, "name": "x", "seed": 0}, seed=7,
                                   run_dir=Path(tmp), work_dir=Path(tmp), data_dir=Path(tmp), executor={}, cache=cache)
                rec = run_point_record(ctx, "env", run_point)
                told = (rec.extra.get("framework") or {}).get("told", {})
                out.append({"level": 0, "framework": fw, "threads": n, "status": rec.status, "error": rec.error,
                            "told": {k: v for k, v in told.items() if k in ("intra_op_threads", "XLA_FLAGS")}})
    model = mlp((8,), 3, [4])
    graph = trace(model, (4, 8))  # the batches below
    w0 = initial_weights(model, graph)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4)) for _ in range(2)]
    for make in (TensorFlowFramework, JaxFramework):
        try:
            steps = run_steps(make(), graph, w0, OptimizerSpec("sgd", 0.1), batches, threads[-1])
            out.append({"level": 2, "framework": steps.framework, "threads": threads[-1], "status": "ok"})
        except ThreadsFixed as err:
            out.append({"level": 2, "framework": make.name, "threads": threads[-1], "status": "failed",
                        "error": str(err)})
    return out


def _in_a_fresh_process(counts: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # d5pipe pins XLA's threads itself
    code = f"import json; from tests.test_framework_threads import points_in_one_process as f; print(json.dumps(f({counts!r})))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out: list[dict[str, Any]] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
def test_a_point_at_other_threads_than_the_process_fixed_fails_and_says_why() -> None:
    first, jax_first, tf_later, jax_later, tf_level2, jax_level2 = _in_a_fresh_process("2,1")
    assert (first["status"], first["told"]["intra_op_threads"]) == ("ok", 2)
    assert jax_first["status"] == "ok" and "intra_op_parallelism_threads=2" in jax_first["told"]["XLA_FLAGS"]
    assert tf_later["status"] == jax_later["status"] == "failed"
    assert tf_later["error"] == (
        "ThreadsFixed: TensorFlow's threads are already fixed at 2 intra-op, 1 inter-op in this process (an "
        "earlier point; 0: TensorFlow's default, all cores); this point asks for 1 intra-op, 1 inter-op: run it "
        "in a process of its own (its own shard)")
    assert jax_later["error"] == ("ThreadsFixed: XLA's CPU threads are already fixed at 2 in this process (set for "
                                  "an earlier point); this point asks for 1: run it in a process of its own (its "
                                  "own shard)")
    assert (tf_level2["status"], jax_level2["status"]) == ("failed", "failed")  # level 2 holds to the same pools
    assert "TensorFlow's threads are already fixed at 2 intra-op" in tf_level2["error"]
    assert "XLA's CPU threads are already fixed at 2" in jax_level2["error"]


@pytest.mark.slow
def test_points_at_the_same_threads_run_one_after_another() -> None:
    got = _in_a_fresh_process("1,1")
    assert [(g["level"], g["framework"], g["status"]) for g in got] == [
        (0, "tensorflow", "ok"), (0, "jax", "ok"), (0, "tensorflow", "ok"), (0, "jax", "ok"),
        (2, "tensorflow", "ok"), (2, "jax", "ok")], got
    assert all(g["told"]["intra_op_threads"] == 1 for g in got if g["framework"] == "tensorflow" and g["level"] == 0)
