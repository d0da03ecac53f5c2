"""Operators from an XPlane profile, the file JAX's and TensorFlow's profilers both write
(``*.xplane.pb``), read with ``jax.profiler.ProfileData`` (jaxlib's reader of that protobuf; the
``frameworks`` extra installs jax beside tensorflow).

Each source says which events are its operators by the host thread they ran on and their name
(:data:`JAX_KERNELS`: the kernels XLA's CPU runtime runs; :data:`TF_OPS`: TensorFlow's ops, a
graph's and eager ones); their durations are summed per operator into the rows of a profiled pass
(d5pipe.measure.profile.pass_record).
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import replacing
from d5pipe.measure.profile import pass_record

OperatorOf = Callable[[str, str], "str | None"]
"""(thread name, event name) -> the operator it is, or None (not one: bookkeeping, markers)."""


def jax_kernel(line: str, name: str) -> str | None:
    """XLA's CPU kernels (fusions, custom calls) on the PjRt client's threads; ``end: ...`` markers
    and the runtime's own bookkeeping (``ThreadpoolListener::Record`` and the like) left out."""
    kernel = line.startswith("tf_XLAPjRtCpuClient") and not name.startswith("end: ") and "::" not in name
    return f"xla::{name}" if kernel else None


EAGER = "EagerLocalExecute: "


def tf_op(line: str, name: str) -> str | None:
    """TensorFlow's ops, per op type: a graph's (a ``tf.function``'s) as its executor runs them
    (``node:OpType`` on its compute threads) and an eager op on the calling thread
    (``EagerLocalExecute: OpType``, dispatch included); a function's own eager call
    (``__inference_...``) is left out, its ops are counted."""
    if line.startswith("tf_Compute") and ":" in name and "::" not in name:  # not ExecutorState::Process
        return f"tf::{name.split(':', 1)[1]}"
    if line == "python" and name.startswith(EAGER) and not name[len(EAGER):].startswith("__"):
        return f"tf::{name[len(EAGER):]}"
    return None


JAX_KERNELS: OperatorOf = jax_kernel
TF_OPS: OperatorOf = tf_op


def xplane_file(directory: Path) -> Path:
    """The one ``*.xplane.pb`` a profiler session wrote under ``directory``."""
    found = sorted(glob.glob(str(directory / "**" / "*.xplane.pb"), recursive=True))
    if not found:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {directory}")
    return Path(found[-1])


def xplane_rows(path: Path, operator_of: OperatorOf) -> list[dict[str, Any]]:
    """Rows per operator (calls, self seconds: durations summed over every host thread); instant
    events (no duration: markers) are not calls."""
    from jax.profiler import ProfileData

    ops: dict[str, dict[str, Any]] = {}
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for event in line.events:
                op = operator_of(line.name, event.name) if event.duration_ns > 0 else None
                if op is not None:
                    row = ops.setdefault(op, {"operator": op, "calls": 0, "self_s": 0.0, "input_shapes": ""})
                    row["calls"] += 1
                    row["self_s"] += event.duration_ns / 1e9
    return [{**r, "total_s": r["self_s"]} for r in ops.values()]


def copy_perfetto_trace(directory: Path, trace: Path) -> bool:
    """JAX's Chrome-trace JSON (``perfetto_trace.json.gz``) under ``directory`` as ``trace``, unzipped."""
    found = sorted(glob.glob(str(directory / "**" / "perfetto_trace.json.gz"), recursive=True))
    if not found:
        return False
    with gzip.open(found[-1], "rb") as src, replacing(trace, durable=False) as tmp, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return True


def profiled_steps(step: Callable[[], object], iterations: int, trace: Path | None,
                   session: Callable[[Path], AbstractContextManager[Any]], operator_of: OperatorOf, source: str,
                   versions: dict[str, str], phase: str = "train_step") -> dict[str, Any]:
    """One warm ``step``, then ``iterations`` of them inside ``session(directory)`` (a profiler that
    writes its XPlane file there): the pass (d5pipe.measure.profile.pass_record) with the
    operators :func:`xplane_rows` finds, and the Chrome trace where the profiler wrote one."""
    started = time.perf_counter()
    step()
    with tempfile.TemporaryDirectory() as tmp:
        with session(Path(tmp)):
            t0 = time.perf_counter()
            for _ in range(iterations):
                step()
            wall = time.perf_counter() - t0
        rows = xplane_rows(xplane_file(Path(tmp)), operator_of)
        traced = trace is not None and copy_perfetto_trace(Path(tmp), trace)
    out = pass_record(phase, source, versions, iterations, wall, rows)
    if traced and trace is not None:
        out["trace"] = trace.name
    out["pass_s"] = time.perf_counter() - started
    return out


def profile_jax(jax: Any, step: Callable[[], object], iterations: int, trace: Path | None,
                phase: str) -> dict[str, Any]:
    """``step`` under ``jax.profiler``: the kernels XLA's CPU runtime ran, and JAX's Chrome trace."""
    return profiled_steps(step, iterations, trace, lambda d: jax.profiler.trace(str(d), create_perfetto_trace=True),
                          JAX_KERNELS, "jax.profiler (XLA CPU kernels)", {"jax": jax.__version__}, phase)


def profile_tf(tf: Any, step: Callable[[], object], iterations: int, trace: Path | None,
               phase: str) -> dict[str, Any]:
    """``step`` under TensorFlow's profiler (``tf.profiler.experimental``): its ops per op type; it
    writes no Chrome trace."""

    @contextlib.contextmanager
    def session(directory: Path) -> Iterator[None]:
        tf.profiler.experimental.start(str(directory))
        try:
            yield
        finally:
            tf.profiler.experimental.stop()

    return profiled_steps(step, iterations, trace, session, TF_OPS, "tf.profiler (ops)", {"tensorflow": tf.__version__},
                          phase)
