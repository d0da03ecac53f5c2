"""The contract between d5pipe and a level: what ``run_point`` receives and may raise.

Every level's ``point.run_point(ctx: PointContext) -> PointOutcome``:

* reads only ``ctx`` (its resolved config sections, seed, directories, the shard's cache);
* returns a :class:`~d5pipe.core.outcome.PointOutcome` (metrics, raw samples, extras);
* raises :class:`PointSkipped` to mark the point ``skipped`` with a reason;
* any other exception marks the point ``failed`` with its error text; the sweep goes on.

The shard (d5pipe.execute.shard) turns the outcome into one atomically written record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from d5pipe.core.outcome import Metric, PointOutcome

__all__ = ["Metric", "PointContext", "PointOutcome", "PointSkipped", "register_closer", "run_closers"]


class PointSkipped(Exception):
    """Raised by a stage when a point cannot run here (e.g. fp16 on a CPU without support)."""


@dataclass
class PointContext:
    """Everything a stage's ``run_point`` may read about the point it runs."""

    experiment: str
    stage: str
    point_id: str
    params: dict[str, Any]
    """Sweep axis key (dotted, e.g. ``operators.size``) -> value for this point."""
    config: dict[str, Any]
    """The point's resolved config: plain dict with the sections this stage reads
    (e.g. ``{"operators": {...}, "timer": {...}, "seed": 1}``), axis values applied."""
    seed: int
    """The point's seed, derived from the root seed and the point ID (d5pipe.core.seeds)."""
    run_dir: Path
    work_dir: Path
    """A scratch directory for this point (created, may hold logs such as a JSONL step log)."""
    data_dir: Path
    """Where ``prepare_data`` materialised the datasets (see d5pipe.levels.datasets)."""
    executor: dict[str, Any]
    """The executor section (local or slurm) as a plain dict."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Shared by all points of one shard process (e.g. a machine-peak measurement, level 3's
    rank sessions); what needs closing is registered with :func:`register_closer`."""
    _: KW_ONLY
    """Fields added after ``cache`` are keyword-only: callers pass ``cache`` by position, and a
    field placed before it took the cache (level 3's rank sessions were then never closed)."""
    profile: dict[str, Any] | None = None
    """The run's ``profile`` section when a profiled pass is asked for (d5pipe.measure.profile),
    else None; the point's timed pass is the same either way."""
    profile_dir: Path | None = None
    """Where the profiled pass writes its trace file."""
    mlperf: dict[str, Any] | None = None
    """The run's ``mlperf`` section (d5pipe.measure.mllog.MlperfConf), its ``platform`` filled in."""
    mlperf_dir: Path | None = None
    """Where the point's MLPerf files go (d5pipe.rundir.layout.RunDir.mlperf_dir): None, none are written."""


def register_closer(cache: dict[str, Any], closer: Callable[[dict[str, Any]], None]) -> None:
    """Have ``closer(cache)`` run when the shard's worker ends (e.g. to stop a rank session
    kept in the cache); registering the same closer twice runs it once."""
    closers: list[Callable[[dict[str, Any]], None]] = cache.setdefault("_closers", [])
    if closer not in closers:
        closers.append(closer)


def run_closers(cache: dict[str, Any]) -> None:
    """Run what :func:`register_closer` registered (each once; errors do not stop the others)."""
    for closer in cache.pop("_closers", []):
        try:
            closer(cache)
        except Exception:  # noqa: BLE001 - a closer must not mask the shard's results
            pass


def profile_pass(ctx: PointContext, extra: dict[str, Any], fn: Callable[[], object], phase: str,
                 device: str = "cpu", sync: Callable[[], None] = lambda: None,
                 native: Callable[[int, Path | None], dict[str, Any]] | None = None) -> None:
    """The point's profiled pass of ``phase`` (d5pipe.measure.profile), after its timed pass, when
    the run asks for one: appended to the record's ``profile`` list; its trace goes to
    ``ctx.profile_dir``. ``native(iterations, trace)``: the engine's own profiler, in place of
    torch.profiler. Nothing without ``profile.enabled``."""
    from d5pipe.measure.profile import enabled, iterations, profile_calls

    if not enabled(ctx.profile):
        return
    name = f"{ctx.point_id}.{phase}.trace.json"
    trace = ctx.profile_dir / name if ctx.profile_dir is not None else None
    n = iterations(ctx.profile)
    extra.setdefault("profile", []).append(
        native(n, trace) if native is not None else
        profile_calls(fn, n, trace, cuda=device.startswith("cuda"), sync=sync, phase=phase))
