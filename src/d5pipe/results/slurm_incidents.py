"""What happened to a run on SLURM, in one table and a few lines: ``slurm_events.parquet``, the top
of the report's SLURM section and ``d5pipe status``.

Three sources, each read once per pass:

* the driver's event log (d5pipe.rundir.slurm_events): slurmctld or the status query not
  answering, and for how long; submissions that waited for a site limit or the run's limit;
* ``sacctmgr show event`` since the run was created (d5pipe.results.accounting.node_events): nodes
  that went down, drained or failed, when, for how long and why;
* the jobs' accounting (``sacct --duplicates``): jobs that ran more than once (requeued after
  their node failed, or by ``scontrol requeue``) and jobs that ended without completing;
* the shards' start logs (``RunDir.restarted_points``): points that started more than once.

:func:`incidents` gives one row per incident (``t`` Unix seconds, ``kind``, ``text``), oldest
first; :func:`incident_lines` says them in at most ``limit`` lines.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pandas as pd

from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.slurm_events import read

COLUMNS = ("t", "kind", "text")
FAILED_STATES = ("NODE_FAIL", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED", "BOOT_FAIL")


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S") if t else "?"


def _epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return 0.0  # sacctmgr's "Unknown" end of an episode that still lasts


def run_since(rd: RunDir) -> str:
    """When the run was created, as sacct's ``-S`` takes it (the manifest's ``created``)."""
    return str(rd.manifest.get("created") or "now-7days")[:19] if rd.manifest_path.is_file() else "now-7days"


def driver_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Outages (one row each, with their length; one still open at the end says so) and waits
    (one row: how many, how long in all, the reasons)."""
    rows: list[dict[str, Any]] = []
    open_since: dict[str, float] = {}
    waits = [e for e in events if e["kind"] == "wait"]
    for e in events:
        if e["kind"] == "wait":
            continue
        if e.get("state") == "down":
            open_since[e["kind"]] = float(e["t"])
        elif e.get("state") == "up":
            start = open_since.pop(e["kind"], float(e["t"]) - float(e.get("down_s", 0)))
            rows.append({"t": start, "kind": e["kind"], "text": f"{_clock(start)}: {e['text']}"})
    for kind, start in open_since.items():
        what = next((e["text"] for e in events if e["kind"] == kind and e.get("state") == "down"), kind)
        rows.append({"t": start, "kind": kind, "text": f"{_clock(start)}: {what}, and had not answered again "
                                                        "when the run's driver last wrote"})
    if waits:
        total = sum(float(w.get("waited_s", 0)) for w in waits)
        reasons = sorted({re.sub(r"array \d+ still has \d+ task\(s\)", "an earlier array still had tasks",
                                 str(w["text"]).split(": ", 1)[-1].split(":", 1)[0]) for w in waits})
        rows.append({"t": float(waits[0]["t"]), "kind": "wait",
                     "text": f"{len(waits)} submission(s) waited, {total:.0f} s in all, for: {'; '.join(reasons)}"})
    return rows


def hosts(nodelist: str) -> set[str]:
    """The node names of a SLURM node list: ``node[1-3,7],gpu2`` -> node1, node2, node3, node7, gpu2."""
    out: set[str] = set()
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]*)\]|([^,\[\]]+)", nodelist):
        if plain:
            out.add(plain.strip())
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                out.update(f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi or lo) + 1))
    return out


def used_nodes(acct: pd.DataFrame | None) -> set[str] | None:
    """Every node a job of the run ran on, in any attempt (None without accounting)."""
    if acct is None or acct.empty or "slurm_nodes" not in acct.columns:
        return None
    history = acct["slurm_history"] if "slurm_history" in acct.columns else pd.Series([], dtype=str)
    named = re.findall(r" on ([^;\s]+)", "; ".join(history.fillna("").astype(str)))
    return set().union(*(hosts(str(n)) for n in [*acct["slurm_nodes"].fillna("").astype(str), *named]))


def node_rows(events: list[dict[str, str]], used: set[str] | None = None) -> list[dict[str, Any]]:
    """Node episodes, of the nodes the run used when known (a site's other nodes are not its story)."""
    rows = []
    for e in events:
        if used is not None and not hosts(e["NodeName"]) & used:
            continue
        start, end = _epoch(e["TimeStart"]), _epoch(e["TimeEnd"])
        span = f"until {_clock(end)} ({end - start:.0f} s)" if end else "still"
        why = f": {e['Reason']}" if e.get("Reason") else ""
        rows.append({"t": start, "kind": "node", "text": f"{_clock(start)}: {e['NodeName']} {e['State']} {span}{why}"})
    return rows


def job_rows(acct: pd.DataFrame | None) -> list[dict[str, Any]]:
    if acct is None or acct.empty or "slurm_state" not in acct.columns:
        return []
    rows = []
    for r in acct.itertuples(index=False):
        attempts = int(getattr(r, "slurm_attempts", 1) or 1)
        where = f" on {r.slurm_nodes}" if r.slurm_nodes else ""
        if attempts > 1:
            rows.append({"t": 0.0, "kind": "requeue", "text": f"job {r.slurm_job_id} ran {attempts} times: "
                                                                 f"{r.slurm_history}; then {r.slurm_state}{where}"})
        elif str(r.slurm_state) in FAILED_STATES:
            rows.append({"t": 0.0, "kind": "job", "text": f"job {r.slurm_job_id} ended {r.slurm_state}{where}; "
                                                             "its unfinished points ran again in a later job"})
    return rows


def incidents(rd: RunDir, acct: pd.DataFrame | None, query: bool) -> pd.DataFrame:
    """Every incident of the run (module docstring); ``query``: ask sacctmgr for the node events,
    else take them from ``slurm_events.parquet`` as the last pass wrote it."""
    from d5pipe.results.accounting import node_events

    rows = driver_rows(read(rd.slurm_events_log)) + job_rows(acct)
    again = rd.restarted_points()
    if again:
        named = ", ".join(f"{p} ({n}x)" for p, n in list(again.items())[:5])
        rows.append({"t": 0.0, "kind": "restart", "text": f"{len(again)} point(s) started more than once (a job "
                                                          f"killed, requeued or run twice): {named}"})
    stored = rd.side_table("slurm_events")
    if query:
        since = run_since(rd)
        nodes, _why = node_events(since)
        rows += node_rows(nodes, used_nodes(acct))
    elif stored.is_file():
        old = pd.read_parquet(stored)
        rows += old[old["kind"] == "node"].to_dict("records")
    return pd.DataFrame(rows, columns=list(COLUMNS)).sort_values("t", kind="stable", ignore_index=True)


def incident_lines(table: pd.DataFrame, limit: int = 12) -> list[str]:
    """``slurm: nothing went wrong`` or one line per incident, the rest counted."""
    if table.empty:
        return ["slurm: no node, controller, accounting or job incident"]
    lines = [f"slurm: {len(table)} incident(s)"] + [f"  {t}" for t in table["text"].head(limit)]
    if len(table) > limit:
        lines.append(f"  ... {len(table) - limit} more in the report's SLURM section")
    return lines


def live_incidents(rd: RunDir) -> pd.DataFrame:
    """:func:`incidents` of a run that may still run: its jobs' accounting asked of sacct now."""
    from d5pipe.results.accounting import job_accounting, run_job_ids

    since = run_since(rd)
    acct, _why = job_accounting(run_job_ids(str(rd.root), since))
    return incidents(rd, acct, query=True)
