"""Level 1 on a network the user brings as an ``.onnx`` file (``level1.onnx_file``).

The file is the network: its first graph input takes a batch of ``level1.batch_size`` samples
(the one symbolic dimension, if any, is the batch), filled from the point's seed. A runtime that
reads ONNX (``onnxruntime``, ``openvino``) runs it. The reference is the ONNX reference
evaluator (``onnx.reference.ReferenceEvaluator``) on a float64 copy of the graph: every float32
initializer, constant, cast and value type widened to float64. ``output_check`` compares the
runtime's outputs with it on the same batch (tolerances: d5pipe.levels.verify). The file's
sha256 is part of the point's identity (d5pipe.plan.build), like user code. Under a LoadGen
scenario (``level1.scenario``) the QSL is :data:`LOADGEN_BATCHES` such batches (d5pipe.levels.level1.loadgen).
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from d5pipe.core.atomic import file_sha256
from d5pipe.core.errors import D5PipeError
from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped, profile_pass
from d5pipe.levels.instantiate import build
from d5pipe.levels.level1.output_check import judge
from d5pipe.levels.level1.runtimes.contract import ReadsOnnx
from d5pipe.levels.level1.runtimes.onnx_runtimes import write_once
from d5pipe.levels.level1.schema import Level1Conf
from d5pipe.levels.targets import target_of
from d5pipe.measure.stats import rate_metric
from d5pipe.measure.timer import measure

LOADGEN_BATCHES = 8
"""The batches (filled from the point's seed) a LoadGen scenario's QSL holds for a network given as a file."""


def input_spec(path: str | Path, batch_size: int) -> tuple[str, tuple[int, ...]]:
    """Name and shape of the file's first graph input, the symbolic dimension set to ``batch_size``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph_input = model.graph.input[0]
    tensor = graph_input.type.tensor_type
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        raise D5PipeError(f"level1.onnx_file: {path}: input {graph_input.name!r} is not float32")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    if dims.count(-1) > 1:
        raise D5PipeError(f"level1.onnx_file: {path}: input {graph_input.name!r} has {dims.count(-1)} symbolic "
                          "dimensions; d5pipe can fill one (the batch)")
    return graph_input.name, tuple(batch_size if d == -1 else d for d in dims)


def float64_model(path: str | Path) -> Any:
    """The graph of ``path`` with every float32 tensor, type and cast widened to float64."""
    import onnx
    from onnx import TensorProto, numpy_helper

    model = copy.deepcopy(onnx.load(str(path)))
    graph = model.graph

    def widen(t: Any) -> None:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    for init in graph.initializer:
        widen(init)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                widen(attr.t)
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.DOUBLE
    return model


def reference_outputs(path: str | Path, input_name: str, x: torch.Tensor) -> torch.Tensor:
    """The first output of the float64 reference evaluation of ``path`` on ``x``."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(float64_model(path))
    outputs: list[Any] = list(evaluator.run(None, {input_name: x.detach().cpu().to(torch.float64).numpy()}))
    return torch.from_numpy(np.asarray(outputs[0], dtype=np.float64))


def keep_in_run(path: Path, sha256: str, onnx_dir: Path) -> Path:
    """The user's file copied (atomically, once per content) into the run directory's ``onnx/``,
    which travels in the bundle: the network a point measured stays with its results. The point
    runs this copy, so what was measured is what is kept."""
    return write_once(onnx_dir / f"user-{sha256[:32]}.onnx", lambda tmp: shutil.copyfile(path, tmp))


def run_onnx_point(ctx: PointContext, conf: Level1Conf, timer_cfg: dict[str, Any]) -> PointOutcome:
    """One level-1 point whose network is ``level1.onnx_file`` (see the module docstring)."""
    if conf.dtype != "float32":
        raise PointSkipped(f"level1.onnx_file: the file's network is float32; level1.dtype={conf.dtype} does not apply")
    path = str(conf.onnx_file)
    name, shape = input_spec(path, conf.batch_size)
    gen = torch.Generator().manual_seed(int(ctx.seed) % (1 << 63))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    key, target = target_of(ctx.config.get("level1") or {}, "runtime")
    runtime = build(target, key)
    if not isinstance(runtime, ReadsOnnx):
        raise PointSkipped(f"level1.runtime={conf.runtime} cannot read an ONNX file (no prepare_file)")
    threads = torch.get_num_threads()
    sha = file_sha256(path)
    kept = keep_in_run(Path(path), sha, Path(ctx.run_dir) / "onnx")
    prepared = runtime.prepare_file({"path": str(kept), "sha256": sha}, threads)

    def infer() -> None:
        prepared.run(x)

    extra: dict[str, Any] = {
        "network": {"onnx_file": path, "sha256": prepared.onnx["sha256"], "input": name, "shape": list(shape),
                    "kept": os.path.relpath(kept, ctx.run_dir)},
        "runtime": {"name": runtime.name, "versions": runtime.versions(),
                    "told": prepared.told, "threads_requested": threads, "threads": prepared.threads},
        "not_measured": {"fwd_bwd": "a network given as an ONNX file runs inference only"}, "warnings": [],
    }
    samples: dict[str, list[float]] = {}
    if conf.scenario != "none":  # MLPerf LoadGen drives the runtime over random batches of the file's input
        from d5pipe.levels.level1.loadgen import run_scenario

        batches = [x, *(torch.randn(shape, generator=gen, dtype=torch.float32) for _ in range(LOADGEN_BATCHES - 1))]
        metrics, extra["loadgen"] = run_scenario(ctx, conf, prepared.run, batches)
        extra["warnings"] = [f"loadgen: {w}" for w in extra["loadgen"]["warnings"]]
    else:
        infer()
        m = measure(infer, timer_cfg, "cpu")
        metrics = m.summary.to_metrics("inference_latency", "s", "inference_latency_s", prefix="inference_latency_")
        metrics.append(rate_metric("inference_throughput", float(shape[0]), m.summary, "samples/s",
                                   "inference_latency_s"))
        extra |= {"timer_inference": m.info(), "warnings": [f"inference: {w}" for w in m.warnings]}
        samples["inference_latency_s"] = list(m.samples)
        profile_pass(ctx, extra, infer, "inference",  # the runtime's own profiler where it has one
                     native=None if prepared.profile is None else functools.partial(prepared.profile, x))
    if conf.output_check:
        found, extra["output_check"] = judge(prepared.run(x), reference_outputs(path, name, x), torch.float32, conf,
                                             "onnx.reference.ReferenceEvaluator, float64 copy of the graph")
        metrics += found
    return PointOutcome(metrics=metrics, samples=samples, extra=extra)
