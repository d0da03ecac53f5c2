"""ONNX Runtime's own profiler for a profiled pass (level 0's ``onnxruntime`` framework, level 1's
``onnxruntime`` runtime): a session built like the timed one, with ``enable_profiling`` on; each
node's kernel time summed per operator type (``ort::<op_type>``), the warm run's left out, and
ONNX Runtime's Chrome trace. Imports onnxruntime when called.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import write_json
from d5pipe.measure.profile import pass_record


def ort_profile(model: str | bytes, options: Any, feed: dict[str, Any], iterations: int, trace: Path | None,
                phase: str) -> dict[str, Any]:
    """One warm and ``iterations`` profiled runs of ``model`` (a path or serialized bytes) on ``feed``,
    in a session with ``options``' threads and graph optimisation: the pass
    (d5pipe.measure.profile.pass_record) and its trace written to ``trace``."""
    import onnxruntime as ort

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        for name in ("intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "execution_mode"):
            setattr(opts, name, getattr(options, name))
        opts.enable_profiling, opts.profile_file_prefix = True, str(Path(tmp) / "ort")
        session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        session.run(None, feed)
        t0 = time.perf_counter()
        for _ in range(iterations):
            session.run(None, feed)
        wall = time.perf_counter() - t0
        events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    after_warm = runs[0]["ts"] + runs[0]["dur"] if runs else 0
    ops: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time") and e["ts"] >= after_warm:
            args = e.get("args") or {}
            row = ops.setdefault(f"ort::{args.get('op_name', '?')}",
                                 {"calls": 0, "self_s": 0.0, "input_shapes": str(args.get("input_type_shape", ""))})
            row["calls"] += 1
            row["self_s"] += float(e["dur"]) / 1e6
    out = pass_record(phase, "onnxruntime profiler", {"onnxruntime": ort.__version__}, iterations, wall,
                      [{"operator": k, **v, "total_s": v["self_s"]} for k, v in ops.items()])
    if trace is not None:
        write_json(trace, {"traceEvents": events})
        out["trace"] = trace.name
    out["pass_s"] = time.perf_counter() - started
    return out
