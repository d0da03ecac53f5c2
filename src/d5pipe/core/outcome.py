"""What a stage returns for one point: :class:`PointOutcome` (its :class:`Metric` values, raw
samples and extras), and the metric kinds that say how a value is compared across runs. The
shard wraps an outcome into a point record (d5pipe.rundir.record).

What each metric name means is declared once, per level, as :class:`Declared` values (each level's
``Level.metrics``; docs/reference/metrics.md and the report read them). A declared name may hold
placeholders (:data:`PLACEHOLDER`): ``compute_s_per_step_rank<N>`` stands for one name per rank.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
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


@dataclass(frozen=True)
class Declared:
    """What a metric name means: its unit, kind, raw samples (a key of the point's samples) and a sentence."""

    unit: str
    kind: MetricKind
    samples: str | None
    about: str


Declarations = Mapping[str, Declared]
"""A level's metric names (some with placeholders) -> what each means."""

PLACEHOLDER = re.compile(r"<([\w/]+)>")
"""A placeholder in a declared name: ``<N>`` stands for a number (a rank), ``<a/b>`` for one of
those words, any other ``<word>`` for a name part (letters, digits, ``_``)."""


def _group(placeholder: str) -> str:
    if placeholder == "N":
        return r"(\d+)"
    return "(" + "|".join(map(re.escape, placeholder.split("/"))) + ")" if "/" in placeholder else r"(\w+?)"


@functools.cache
def name_regex(declared: str) -> re.Pattern[str]:
    """The metric names ``declared`` stands for (use ``fullmatch``); each placeholder is a group."""
    parts = PLACEHOLDER.split(declared)  # literal, placeholder, literal, ...
    return re.compile("".join(re.escape(p) if i % 2 == 0 else _group(p) for i, p in enumerate(parts)))


def fill(declared: str, *values: object) -> str:
    """The metric name ``declared`` stands for with its placeholders, in order, replaced by ``values``."""
    found = iter(values)
    return PLACEHOLDER.sub(lambda _: str(next(found)), declared)


def lookup(declared: Declarations, name: str) -> tuple[str, Declared] | None:
    """``name``'s declaration: its own entry, else the first declared pattern it matches; None: undeclared."""
    if name in declared:
        return name, declared[name]
    return next(((key, d) for key, d in declared.items()
                 if "<" in key and name_regex(key).fullmatch(name)), None)


def declared_metric(declared: Declarations, name: str, value: Any, kind: MetricKind | None = None,
                    ci: tuple[float | None, float | None] | None = None, detail: str | None = None) -> Metric:
    """``name``'s :class:`Metric` with the unit, kind and samples ``declared`` gives it (``kind``
    replaces its kind; a pattern's samples key gets the name's placeholders); a name not declared
    there is a KeyError."""
    found = lookup(declared, name)
    if found is None:
        raise KeyError(f"metric {name!r} is not declared")
    (key, d), (low, high) = found, ci or (None, None)
    samples = d.samples
    if samples is not None and key != name:
        groups = name_regex(key).fullmatch(name)
        samples = fill(samples, *(groups.groups() if groups else ()))
    return Metric(name, value, d.unit, kind or d.kind, low, high, samples, detail)
