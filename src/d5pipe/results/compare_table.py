"""A run comparison as plain text, readable at a glance (``d5pipe compare``, ``d5pipe ab``).

One heading per configuration, configurations with a change first, then the undecided ones; under
it one line per timing (repetitions folded in: each side's geometric mean and count, the change
with its 95% CI, the verdict; an inconclusive one with the repetitions per side that would decide it), changed and
inconclusive first; timings that follow another are
named on one line; outlier repetitions on their own line; the other metrics collapsed into one
line when they agree in every repetition, listed when they do not. The last line counts the
verdicts.
"""

from __future__ import annotations

import math
from typing import Any

from d5pipe.results.compare import RunComparison
from d5pipe.results.metric_compare import Comparison
from d5pipe.results.repetition_values import MAX_NEEDED
from d5pipe.results.report.units import natural_key, quantity
from d5pipe.results.timing_compare import TimingComparison

WIDTH = 120
"""Lines are at most this many characters."""
_COLUMNS: tuple[tuple[str, int], ...] = (("metric", 22), ("A", 16), ("B", 16), ("change [95% CI]", 24))
_ID_WIDTH = 40
_ORDER = {"changed": 0, "inconclusive": 1, "not_compared": 2, "equivalent": 3}


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _short_id(point_id: str) -> str:
    """Long point IDs keep their start and their hash suffix: ``size128-dtype…269d17adb774``."""
    return point_id if len(point_id) <= _ID_WIDTH else point_id[: _ID_WIDTH - 13] + "…" + point_id[-12:]


def _cell(v: Any, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} {unit}".strip()
    if isinstance(v, float):
        return quantity(v, unit)
    return str(v)


def _pct(x: float) -> str:
    return f"{100 * (x - 1):+.1f}%"


def _change(t: TimingComparison) -> str:
    if t.ratio is None:
        return "-"
    ci = f" [{_pct(t.ci[0])}, {_pct(t.ci[1])}]" if t.ci else ""
    return _pct(t.ratio) + ci


def _verdict(t: TimingComparison) -> str:
    if t.verdict == "equivalent":
        return f"equivalent (within x{1 + t.margin:g})"
    if t.verdict == "inconclusive":
        if not t.needed:
            return "inconclusive"
        return f"inconclusive (needs {'>' if t.needed >= MAX_NEEDED else '~'}{t.needed}/side)"
    if t.verdict == "not_compared":
        return f"not compared: {t.reason}" if t.reason else "not compared"
    return t.label()


def _timing_lines(timings: list[TimingComparison]) -> list[str]:
    lines: list[str] = []
    shown = sorted((t for t in timings if not t.derived_from), key=lambda t: _ORDER.get(t.verdict, 9))
    followers: dict[str, list[str]] = {}
    for t in timings:
        if t.derived_from:
            followers.setdefault(t.derived_from, []).append(t.metric)
    for t in shown:
        n_a = sum(1 for v in t.a.values if math.isfinite(v))
        n_b = sum(1 for v in t.b.values if math.isfinite(v))
        cells = (t.metric, f"{_cell(t.value_a, t.unit)} x{n_a}", f"{_cell(t.value_b, t.unit)} x{n_b}", _change(t))
        row = " ".join(_fit(v, w).ljust(w) for v, (_, w) in zip(cells, _COLUMNS))
        lines.append(_fit(f"  {row} {_verdict(t)}", WIDTH))
        if t.metric in followers:
            lines.append(_fit(f"    ({', '.join(followers[t.metric])} follow {t.metric})", WIDTH))
        for o in t.outliers:
            lines.append(_fit(f"    ! outlier left out of the test: {o.text(t.unit)}", WIDTH))
        if t.reason and t.verdict != "not_compared":
            lines.append(_fit(f"    {t.reason}", WIDTH))
    return lines


def _other_lines(comps: list[Comparison]) -> list[str]:
    differ = [c for c in comps if c.verdict == "not_reproduced"]
    same = [c for c in comps if c.verdict == "reproduced" and c.kind != "info"]
    lines = [_fit(f"  {c.metric}: differs: {_cell(c.reference, c.unit)} -> {_cell(c.candidate, c.unit)}"
                  f" ({c.detail})", WIDTH) for c in differ]
    if same:
        lines.append(_fit(f"  {len(same)} other metric(s) identical or within tolerance in every repetition", WIDTH))
    extra = [c for c in comps if c.verdict == "not_compared" and c.kind != "info"]
    if extra:
        lines.append(_fit(f"  only in B: {', '.join(c.metric for c in extra)}", WIDTH))
    return lines


def summary_line(result: RunComparison) -> str:
    """``18 timings: 2 changed (1 slower, 1 faster), 5 inconclusive, 11 equivalent (within x1.1); ...``."""
    c = result.counts()
    slower = sum(t.direction == "slower" for t in result.timings if not t.derived_from)
    faster = sum(t.direction == "faster" for t in result.timings if not t.derived_from)
    total = sum(c.values())
    differ = sum(x.verdict == "not_reproduced" for p in result.points for x in p.comparisons)
    parts = [f"{c['changed']} changed ({slower} slower, {faster} faster)", f"{c['inconclusive']} inconclusive",
             f"{c['equivalent']} equivalent (within x{1 + result.policy.margin:g})"]
    if c["not_compared"]:
        parts.append(f"{c['not_compared']} not compared")
    how = "paired by repetition, interleaved" if result.paired else "measured in separate runs"
    return (f"{total} timings ({how}): {', '.join(parts)}; {differ} other metric(s) differ; "
            f"{len(result.points)} configurations shared, {len(result.only_ref)} points only in A, "
            f"{len(result.only_new)} only in B")


def format_table(result: RunComparison) -> str:
    """The comparison as text (module docstring), at most :data:`WIDTH` columns a line."""
    head = " ".join(name.ljust(w) for name, w in _COLUMNS) + " verdict"
    lines = [_fit("  " + head, WIDTH)]
    for p in sorted(result.points, key=lambda p: (p.worst(), natural_key(p.stage), natural_key(p.point_id))):
        params = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(p.params.items()))
        lines.append(_fit(f"{p.stage} {_short_id(p.point_id)}" + (f"  ({params})" if params else ""), WIDTH))
        lines += _timing_lines(p.timings)
        if p.why:
            lines.append(_fit(f"    where the time went (profiles): {p.why}", 10 * WIDTH))
        lines += _other_lines([c for c in p.comparisons if not (c.metric == "status" and c.verdict == "reproduced")])
    lines.append(_fit(summary_line(result), 10 * WIDTH))
    return "\n".join(lines)
