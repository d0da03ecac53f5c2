"""What a stage returns for one point: :class:`PointOutcome` (its :class:`Metric` values, raw
samples and extras), and the metric kinds that say how a value is compared across runs. The
shard wraps an outcome into a point record (d5pipe.rundir.record)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

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
    detail: str | None = None
    """Why a verdict says what it says (a sentence); written only when set, and shown as that
    row's ``error`` in results.parquet (so a failed check's reason names its evidence)."""

    def to_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = None if math.isnan(value) else value
        out: dict[str, Any] = {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "kind": self.kind,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "samples": self.samples,
        }
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@dataclass
class PointOutcome:
    """What a stage's ``run_point`` returns for one point."""

    metrics: list[Metric] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    """Raw samples (e.g. per-repetition times in seconds), kept in the record."""
    extra: dict[str, Any] = field(default_factory=dict)
    """JSON-serialisable extras: curves, notes, warnings (``extra["warnings"]``: list[str])."""
