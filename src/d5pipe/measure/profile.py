"""Where a point's time goes: one profiled pass, separate from the timed one.

:func:`profile_calls` runs a point's function ``iterations`` more times under ``torch.profiler``
(CPU, and CUDA where the device is a GPU), after the timer is done with it: the timed samples are
the same with and without profiling. It returns one row per operator and input shapes (calls,
self time, total time, share of the step: self time over the profiled loop's wall time) and
writes the profiler's own trace (Chrome-trace JSON, which Perfetto and chrome://tracing open).

The rows are the record's ``profile`` entry; d5pipe.results.profiles gathers them into the run's
``profile.parquet``, the report's top operators and the operators a changed timing is made of.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import replacing
from d5pipe.core.fields import at_least, setting

SOURCE = "torch.profiler"


@dataclass
class ProfileConf:
    """The ``profile`` section: an opt-in profiled pass per point, after its timed pass."""

    enabled: bool = False
    """Profile every point of the run (``d5pipe profile RUN POINT_ID`` profiles one afterwards)."""
    iterations: int = at_least(5, 1)
    """Calls of the point's function under the profiler: level 0's operator, level 1's network,
    a training step at level 2, and on each rank a step of the strategy at level 3 (its
    collectives included)."""
    top: int = at_least(10, 1)
    """Operators per point the report lists, by self time."""


def enabled(section: dict[str, Any] | None) -> bool:
    return bool(section and section.get("enabled"))


def iterations(section: dict[str, Any] | None) -> int:
    """``profile.iterations`` of a run's section (the schema's default where it is left out)."""
    return int(setting(section, ProfileConf, "iterations"))


def profile_calls(fn: Callable[[], object], iterations: int, trace: Path | None = None,
                  cuda: bool = False, sync: Callable[[], None] = lambda: None, phase: str = "call") -> dict[str, Any]:
    """Profile ``iterations`` calls of ``fn`` (one warm call before, not profiled): rows per
    (operator, input shapes), the loop's wall seconds per call, and the trace file written.
    ``phase`` names what one call is (``forward``, ``inference``, ``train_step``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    started = time.perf_counter()
    fn()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        sync()
        wall = time.perf_counter() - t0
    rows = []
    for evt in prof.key_averages(group_by_input_shape=True):
        self_s = evt.self_cpu_time_total / 1e6
        if cuda:
            self_s += getattr(evt, "self_device_time_total", 0.0) / 1e6
        rows.append({"operator": evt.key, "calls": int(evt.count), "self_s": self_s,
                     "total_s": evt.cpu_time_total / 1e6,
                     "input_shapes": str(evt.input_shapes) if evt.input_shapes else ""})
    out = pass_record(phase, SOURCE, {"torch": torch.__version__}, iterations, wall, rows)
    if trace is not None:
        with replacing(trace, durable=False, created=False) as tmp:  # the profiler writes the file itself
            prof.export_chrome_trace(str(tmp))
        out["trace"] = trace.name
    out["pass_s"] = time.perf_counter() - started  # what the pass added to the point: its measured cost
    return out


def pass_record(phase: str, source: str, versions: dict[str, str], iterations: int, wall: float,
                rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One profiled pass as a record keeps it (every source's, torch.profiler's and a runtime's own):
    ``rows`` (operator, calls, self_s, total_s, input_shapes) sorted by self time, each with its
    share of the profiled loop's ``wall`` seconds; the caller adds ``trace`` and ``pass_s``."""
    rows = sorted(({**r, "share": r["self_s"] / wall if wall > 0 else None} for r in rows), key=lambda r: -r["self_s"])
    return {"phase": phase, "source": source, **versions, "iterations": iterations, "step_s": wall / iterations,
            "rows": rows}
