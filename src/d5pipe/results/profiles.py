"""Profiles of a run's points (d5pipe.measure.profile), tidy: ``profile.parquet``, each point's top
operators, and which operators a changed timing is made of.

One row per (point, repetition, rank, phase, operator, input shapes)::

    stage, point_id, repetition, rank, phase, operator, input_shapes, calls, self_s, total_s,
    share, step_s, iterations, source, trace

``self_s``/``total_s`` are seconds over the pass's ``iterations`` calls; ``share`` is ``self_s``
over the pass's wall time; ``trace`` is the profiler's own file under ``profiles/<stage>/``. A
point profiled afterwards (``d5pipe profile``, its record under ``profiles/<stage>/``) replaces
what its own record held.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd

from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.rundir.layout import RunDir

COLUMNS = ["stage", "point_id", "repetition", "rank", "phase", "operator", "input_shapes", "calls", "self_s",
           "total_s", "share", "step_s", "iterations", "source", "trace"]


def profile_rows(stage: str, point_id: str, params: dict[str, Any], passes: Any) -> list[dict[str, Any]]:
    """The rows of one record's ``profile`` entry (a list of passes; none when it holds none)."""
    if not isinstance(passes, list):
        return []
    rep = params.get(REPEAT_AXIS, 0)
    out = []
    for p in passes:
        if not isinstance(p, dict):
            continue
        head = {"stage": stage, "point_id": point_id, "repetition": int(rep) if isinstance(rep, int) else 0,
                "rank": int(p.get("rank", 0)), "phase": str(p.get("phase", "")), "step_s": p.get("step_s"),
                "iterations": p.get("iterations"), "source": p.get("source"), "trace": p.get("trace", "")}
        for row in p.get("rows") or ():
            out.append({**head, **{k: row.get(k) for k in ("operator", "input_shapes", "calls", "self_s",
                                                           "total_s", "share")}})
    return out


def later_profiles(rd: RunDir) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(stage, point_id, record) of the points profiled afterwards by ``d5pipe profile``."""
    root = rd.root / "profiles"
    if not root.is_dir():
        return
    for stage_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in sorted(stage_dir.glob("*.json")):
            if path.name.endswith(".trace.json"):
                continue
            rec = json.loads(path.read_text(encoding="utf-8"))
            yield stage_dir.name, path.stem, rec


def profile_frame(rows: list[dict[str, Any]], rd: RunDir | None = None) -> pd.DataFrame:
    """``profile.parquet``'s table from the records' rows, with the later profiles of ``rd`` in
    place of the same points' own."""
    if rd is not None:
        later = {(s, pid): rec for s, pid, rec in later_profiles(rd)}
        if later:
            rows = [r for r in rows if (r["stage"], r["point_id"]) not in later]
            for (stage, pid), rec in later.items():
                rows += profile_rows(stage, pid, rec.get("params") or {}, (rec.get("extra") or {}).get("profile"))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["stage", "point_id", "repetition", "rank", "phase", "self_s"],
                             ascending=[True, True, True, True, True, False], ignore_index=True)


def by_operator(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, point, phase, operator): self seconds per call of the profiled function, the
    median over repetitions and ranks (input shapes summed)."""
    if frame.empty:
        return pd.DataFrame(columns=["stage", "point_id", "phase", "operator", "self_per_call_s", "share"])
    f = frame.assign(per_call=frame["self_s"] / frame["iterations"].astype(float))
    summed = f.groupby(["stage", "point_id", "repetition", "rank", "phase", "operator"], as_index=False).agg(
        per_call=("per_call", "sum"), share=("share", "sum"))
    return summed.groupby(["stage", "point_id", "phase", "operator"], as_index=False).agg(
        self_per_call_s=("per_call", "median"), share=("share", "median"))


def top_operators(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """Each profiled point's ``n`` operators with the most self time (the report's table)."""
    ops = by_operator(frame)
    if ops.empty:
        return ops
    ops = ops.sort_values(["stage", "point_id", "phase", "self_per_call_s"], ascending=[True, True, True, False])
    return ops.groupby(["stage", "point_id", "phase"], as_index=False).head(n).reset_index(drop=True)


def changed_operators(a: pd.DataFrame, b: pd.DataFrame, limit: int = 3) -> list[tuple[str, float]]:
    """The operators whose self time per call changed most from ``a`` to ``b`` (two profiles of
    one point, :func:`by_operator` rows): ``(operator, seconds of change)``, largest first."""
    sa = a.groupby("operator")["self_per_call_s"].sum()
    sb = b.groupby("operator")["self_per_call_s"].sum()
    delta = sb.sub(sa, fill_value=0.0)
    order = delta.abs().sort_values(ascending=False).index[:limit]
    return [(str(op), float(delta[op])) for op in order if delta[op] != 0.0]


def explain_change(a: pd.DataFrame, b: pd.DataFrame, limit: int = 3) -> str:
    """"aten::sort +31 us of +38 us, aten::mul -2 us" for one point's two profiles ('' without both)."""
    if a.empty or b.empty:
        return ""
    total = float(b["self_per_call_s"].sum() - a["self_per_call_s"].sum())
    parts = [f"{op} {_us(d)} of {_us(total)}" for op, d in changed_operators(a, b, limit)]
    return "; ".join(parts)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:+.4g} us" if abs(seconds) < 1e-3 else f"{seconds * 1e3:+.4g} ms"

