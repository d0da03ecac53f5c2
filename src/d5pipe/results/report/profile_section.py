"""The report's profile section: each profiled point's top operators by self time
(d5pipe.results.profiles), with the source and where the traces are."""

from __future__ import annotations

from typing import Any

from d5pipe.results.profiles import top_operators
from d5pipe.results.report.blocks import Section, Table, Text

MAX_POINTS = 40
"""Profiled points shown (all are in profile.parquet)."""


def profiles(data: Any) -> Section | None:
    frame = data.res.profiles
    if frame is None or frame.empty:
        return None
    conf = data.config.get("profile") if isinstance(data.config.get("profile"), dict) else {}
    top = top_operators(frame, int((conf or {}).get("top", 10)))
    keys = list(dict.fromkeys(zip(top["stage"], top["point_id"])))
    shown = set(keys[:MAX_POINTS])
    rows = [[r.stage, r.point_id, r.phase, r.operator, f"{r.self_per_call_s * 1e6:.4g}",
             "" if r.share != r.share else f"{100 * r.share:.1f}%"]
            for r in top.itertuples() if (r.stage, r.point_id) in shown]
    sources = ", ".join(sorted(str(s) for s in frame["source"].dropna().unique()))
    blocks: list[Any] = [
        Text(f"A profiled pass after each point's timed pass ({sources}); the timed results do not include it. "
             "Self time per call of the point's function (median over repetitions and ranks) and its share of "
             "the profiled wall time. Every operator is in profile.parquet; each pass's trace "
             "(Chrome-trace JSON: Perfetto, chrome://tracing) is under profiles/<stage>/."),
        Table(["stage", "point", "phase", "operator", "self us/call", "share"], rows,
              f"Top operators by self time ({len(keys)} profiled point(s))"),
    ]
    if len(keys) > MAX_POINTS:
        blocks.append(Text(f"Showing {MAX_POINTS} of {len(keys)} profiled points.", "note"))
    return Section("profiles", "Where the time goes (profiles)", blocks)
