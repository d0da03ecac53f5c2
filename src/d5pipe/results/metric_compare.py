"""Compare one non-timing metric between a reference run and a candidate run, by metric kind.

* ``deterministic``, ``count``, ``verdict``: exact equality (NaN equals NaN; a missing value only
  equals a missing value) -> ``reproduced`` (identical) or ``not_reproduced``.
* ``numerical``: ``math.isclose(ref, new, rel_tol=rtol, abs_tol=atol)`` -> ``reproduced`` (within
  tolerance) or ``not_reproduced`` (defaults ``rtol=1e-3``, ``atol=1e-6``; configurable).
* ``info``: ``not_compared``.

Timings are not compared here: one timing is compared across the repetitions of both sides by
:mod:`d5pipe.results.timing_compare`, the one comparison model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

from d5pipe.results.columns import is_missing

Verdict = Literal["reproduced", "not_reproduced", "not_compared"]
EXACT_KINDS = frozenset({"deterministic", "count", "verdict"})
NOT_COMPARED_KINDS = {"info": "info metric",
                      "timing": "a timing: compared across repetitions (d5pipe.results.timing_compare)"}


@dataclass(frozen=True)
class ComparePolicy:
    """Tolerances of numerical metrics."""

    rtol: float = 1e-3
    atol: float = 1e-6


@dataclass(frozen=True)
class MetricValue:
    """One side of a comparison: the value of a metric in one run (one repetition)."""

    value: float | str | None
    unit: str = ""
    kind: str = "numerical"
    ci_low: float | None = None
    ci_high: float | None = None


@dataclass(frozen=True)
class Comparison:
    """The verdict on one non-timing metric."""

    metric: str
    kind: str
    verdict: Verdict
    reference: float | str | None
    candidate: float | str | None
    unit: str = ""
    rel_change: float | None = None
    detail: str = ""

    def label(self) -> str:
        """``identical``, ``within tolerance``, ``differs``, ``not compared``."""
        if self.verdict == "reproduced":
            return "within tolerance" if self.kind == "numerical" else "identical"
        return "differs" if self.verdict == "not_reproduced" else "not compared"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("reference", "candidate", "rel_change"):
            v = out[key]
            if isinstance(v, float) and not math.isfinite(v):
                out[key] = None if math.isnan(v) else str(v)
        out["label"] = self.label()
        return out


def _same(a: float | str | None, b: float | str | None) -> bool:
    if is_missing(a) or is_missing(b):
        return is_missing(a) and is_missing(b)
    return a == b


def _rel(ref: float, new: float) -> float | None:
    if ref == 0:
        return None if new == 0 else math.copysign(math.inf, new)
    return (new - ref) / abs(ref)


def _fmt(v: float | str | None) -> str:
    return "missing" if is_missing(v) else (f"{v:.6g}" if isinstance(v, float) else str(v))


def compare_metric(name: str, ref: MetricValue, new: MetricValue, policy: ComparePolicy | None = None) -> Comparison:
    """Compare metric ``name`` of the reference run with the candidate run, by ``ref.kind``."""
    policy = policy or ComparePolicy()
    kind = ref.kind
    base: dict[str, Any] = {"metric": name, "kind": kind, "reference": ref.value, "candidate": new.value, "unit": ref.unit}
    if kind in NOT_COMPARED_KINDS:
        return Comparison(**base, verdict="not_compared", detail=NOT_COMPARED_KINDS[kind])
    if kind in EXACT_KINDS:
        same = _same(ref.value, new.value)
        return Comparison(**base, verdict="reproduced" if same else "not_reproduced",
                          detail="identical" if same else f"{_fmt(ref.value)} != {_fmt(new.value)}")
    # numerical (and any unknown kind, treated the same way)
    if is_missing(ref.value) or is_missing(new.value) or isinstance(ref.value, str) or isinstance(new.value, str):
        same = _same(ref.value, new.value)
        return Comparison(**base, verdict="reproduced" if same else "not_reproduced",
                          detail=f"{_fmt(ref.value)} vs {_fmt(new.value)}")
    a, b = float(cast(float, ref.value)), float(cast(float, new.value))
    close = math.isclose(a, b, rel_tol=policy.rtol, abs_tol=policy.atol) or (math.isinf(a) and a == b)
    rel = _rel(a, b)
    return Comparison(
        **base, verdict="reproduced" if close else "not_reproduced", rel_change=rel,
        detail=f"{a:.9g} vs {b:.9g} (|diff| {abs(b - a):.3g}; rtol {policy.rtol}, atol {policy.atol})",
    )
