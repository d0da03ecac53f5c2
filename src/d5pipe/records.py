"""Per-point records: what a stage returns for one sweep point, and how it is stored.

Contract shared by every level (see docs/architecture.md):

* a stage runner is ``run_point(ctx: PointContext) -> PointOutcome``;
* it raises :class:`PointSkipped` to mark a point ``skipped`` with a reason;
* any other exception marks the point ``failed`` with its error text; the sweep goes on;
* the shard runner writes one JSON record per point, atomically, as soon as it is done.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from d5pipe.atomic import write_json

RECORD_SCHEMA_VERSION = 1

MetricKind = Literal["timing", "numerical", "deterministic", "verdict", "count", "info"]
"""How a metric is compared when an experiment is reproduced.

* ``timing``: nondeterministic; compared statistically using ``samples[metric.samples]``;
* ``numerical``: floating point result (loss, accuracy, error norms); compared with a tolerance;
* ``deterministic``: must be bit-identical (checksums, counts derived from config);
* ``verdict``: a ``pass``/``fail`` string;
* ``count``: an exact integer (samples taken, outliers);
* ``info``: descriptive, never compared.
"""

Status = Literal["ok", "failed", "skipped"]


class PointSkipped(Exception):
    """Raised by a stage runner when a point cannot run here (e.g. fp16 on a CPU without support)."""


@dataclass
class Metric:
    """One measured or derived value of a point."""

    name: str
    value: float | int | str | bool | None
    unit: str = ""
    kind: MetricKind = "numerical"
    ci_low: float | None = None
    ci_high: float | None = None
    samples: str | None = None
    """Key into ``PointOutcome.samples`` holding the raw samples this value summarises."""

    def to_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = None if math.isnan(value) else value
        return {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "kind": self.kind,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "samples": self.samples,
        }


@dataclass
class PointOutcome:
    """What a stage runner returns for one point."""

    metrics: list[Metric] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    """Raw samples (e.g. per-repetition times in seconds), kept in the record."""
    extra: dict[str, Any] = field(default_factory=dict)
    """JSON-serialisable extras: curves, notes, warnings (``extra["warnings"]``: list[str])."""


@dataclass
class PointContext:
    """Everything a stage runner may read about the point it runs."""

    experiment: str
    stage: str
    point_id: str
    params: dict[str, Any]
    """Sweep axis key (dotted, e.g. ``operators.size``) -> value for this point."""
    config: dict[str, Any]
    """The point's resolved config: plain dict with the sections this stage reads
    (e.g. ``{"operators": {...}, "timer": {...}, "seed": 1}``), axis values applied."""
    seed: int
    """The point's seed, derived from the root seed and the point ID (d5pipe.seeds)."""
    run_dir: Path
    work_dir: Path
    """A scratch directory for this point (created, may hold logs such as a JSONL step log)."""
    data_dir: Path
    """Where ``prepare_data`` materialised the datasets (see d5pipe.datasets)."""
    executor: dict[str, Any]
    """The executor section (local or slurm) as a plain dict."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Shared by all points of one shard process (e.g. a machine-peak measurement)."""


def record_path(run_dir: Path, stage: str, point_id: str) -> Path:
    return Path(run_dir) / "points" / stage / f"{point_id}.json"


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a point record atomically (temp file + rename)."""
    record = dict(record)
    record.setdefault("schema_version", RECORD_SCHEMA_VERSION)
    write_json(path, record)


def read_record(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        rec: dict[str, Any] = json.load(fh)
    return rec
