"""SLURM accounting of a run's jobs: what ``sacct`` says each shard job used.

For every SLURM job named in the points' provenance (``provenance.slurm_job_id``), ``sacct``
gives its state, elapsed time, CPU time, peak resident memory and nodes. :func:`job_accounting`
returns one row per job with CPU efficiency (CPU time / (elapsed x allocated CPUs)) and memory
efficiency (MaxRSS / requested memory), and every attempt of the job (``sacct --duplicates``: a job
requeued after its node failed, or by ``scontrol requeue``, ran more than once); finalize joins it onto the points' rows of
``results.parquet`` (``slurm_*`` columns) and writes it as ``accounting.parquet``; the report
shows it as the efficiency table. Without accounting (no slurmdbd) it is empty and says why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from typing import Any

import pandas as pd

from d5pipe.core.toolchain import run_tool

FIELDS = ("JobIDRaw", "JobID", "State", "ElapsedRaw", "TotalCPU", "MaxRSS", "ReqMem", "AllocCPUS",
          "NodeList")
COLUMNS = ("slurm_job_id", "slurm_state", "slurm_elapsed_s", "slurm_cpu_s", "slurm_maxrss_mb",
           "slurm_req_mem_mb", "slurm_alloc_cpus", "slurm_nodes", "slurm_cpu_efficiency",
           "slurm_mem_efficiency", "slurm_attempts", "slurm_history")
"""``slurm_attempts``: how often the job started; ``slurm_history``: each earlier attempt's end
state and node, ``"NODE_FAIL on node3; REQUEUED on node7"`` (empty for a job that ran once)."""


def _seconds(text: str) -> float:
    """sacct's ``[D-]HH:MM:SS[.fff]`` or ``MM:SS.fff`` as seconds."""
    text = text.strip()
    if not text:
        return 0.0
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    h, m, s = [0.0] * (3 - len(parts)) + parts
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def _megabytes(text: str) -> float:
    """sacct's ``123456K`` / ``2G`` / ``2048M`` (``n``/``c`` suffixes of ReqMem dropped) as MB."""
    text = text.strip().rstrip("nc")
    if not text:
        return 0.0
    scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
    unit = text[-1].upper()
    if unit in scale:
        return float(text[:-1]) * scale[unit]
    return float(text) / 2**20  # bytes


def parse_sacct(text: str) -> pd.DataFrame:
    """One row per job from ``sacct -P -o <FIELDS>`` (allocation and step lines)."""
    rows: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(FIELDS):
            continue
        rec = dict(zip(FIELDS, parts, strict=True))
        raw = rec["JobIDRaw"]
        job = raw.split(".", 1)[0]
        row = rows.setdefault(job, {"slurm_job_id": job, "slurm_maxrss_mb": 0.0, "slurm_attempts": 0,
                                    "slurm_history": ""})
        if "." not in raw:  # the allocation line: one per attempt with --duplicates, the last one last
            if row["slurm_attempts"]:
                earlier = f"{row['slurm_state']} on {row['slurm_nodes'] or 'no node'}"
                row["slurm_history"] = f"{row['slurm_history']}; {earlier}" if row["slurm_history"] else earlier
            row["slurm_attempts"] += 1
            row.update(slurm_state=rec["State"].split()[0], slurm_elapsed_s=float(rec["ElapsedRaw"] or 0),
                       slurm_cpu_s=_seconds(rec["TotalCPU"]), slurm_req_mem_mb=_megabytes(rec["ReqMem"]),
                       slurm_alloc_cpus=int(rec["AllocCPUS"] or 0), slurm_nodes=rec["NodeList"])
        if rec["MaxRSS"]:
            row["slurm_maxrss_mb"] = max(row["slurm_maxrss_mb"], _megabytes(rec["MaxRSS"]))
    df = pd.DataFrame(list(rows.values()))
    if df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    for col in COLUMNS:
        if col not in df:
            df[col] = None
    cpu_time = df["slurm_elapsed_s"].astype(float) * df["slurm_alloc_cpus"].astype(float)
    df["slurm_cpu_efficiency"] = (df["slurm_cpu_s"].astype(float) / cpu_time).where(cpu_time > 0)
    mem = df["slurm_req_mem_mb"].astype(float)
    df["slurm_mem_efficiency"] = (df["slurm_maxrss_mb"].astype(float) / mem).where(mem > 0)
    return df[list(COLUMNS)]


def _sacct(args: list[str], timeout_s: float, tool: str = "sacct") -> subprocess.CompletedProcess[str] | str:
    """``sacct <args>`` (or ``tool``; ``SLURM_CONF`` from ``D5PIPE_SLURM_CONF`` unless set), or why it did not run."""
    env = dict(os.environ)
    if "D5PIPE_SLURM_CONF" in env:
        env.setdefault("SLURM_CONF", env["D5PIPE_SLURM_CONF"])
    try:
        return run_tool([tool, *args], timeout_s, env) or f"{tool} is not installed here"
    except subprocess.TimeoutExpired:
        return f"{tool} did not answer within {timeout_s:g} s"


def run_job_ids(run_dir: str, since: str, timeout_s: float = 60.0) -> set[str]:
    """IDs of every job sacct knows whose working directory is ``run_dir`` (submitted since
    ``since``): also the jobs that lost their node before any of their points finished."""
    proc = _sacct(["-n", "-X", "-P", "-o", "JobIDRaw,WorkDir", "-S", since], timeout_s)
    if isinstance(proc, str):
        return set()
    target = os.path.realpath(run_dir)
    out = set()
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        job, _, workdir = line.partition("|")
        if workdir and os.path.realpath(workdir) == target:
            out.add(job)
    return out


def job_accounting(job_ids: Iterable[str], timeout_s: float = 60.0) -> tuple[pd.DataFrame, str]:
    """``sacct`` rows of ``job_ids`` and, when there are none, why."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return pd.DataFrame(columns=list(COLUMNS)), "no SLURM jobs (a local run)"
    proc = _sacct(["-n", "-P", "--duplicates", "-o", ",".join(FIELDS), "-j", ",".join(ids)], timeout_s)
    if isinstance(proc, str):
        return pd.DataFrame(columns=list(COLUMNS)), proc
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        return pd.DataFrame(columns=list(COLUMNS)), f"sacct failed: {first} (no accounting on this cluster?)"
    return parse_sacct(proc.stdout), ""


EVENT_FIELDS = ("NodeName", "TimeStart", "TimeEnd", "State", "Reason")


def node_events(since: str, timeout_s: float = 30.0) -> tuple[list[dict[str, str]], str]:
    """The nodes that went down, drained or failed since ``since`` (``sacctmgr show event``: one
    row per episode, ``TimeEnd`` empty while it lasts) and, when it cannot say, why."""
    proc = _sacct(["-n", "-P", "show", "event", f"start={since}", f"format={','.join(EVENT_FIELDS)}"],
                  timeout_s, tool="sacctmgr")
    if isinstance(proc, str):
        return [], proc
    if proc.returncode != 0:
        return [], f"sacctmgr failed: {(proc.stderr.strip().splitlines() or ['?'])[0]}"
    rows = [dict(zip(EVENT_FIELDS, line.split("|"), strict=True)) for line in proc.stdout.splitlines()
            if line.count("|") == len(EVENT_FIELDS) - 1]
    return [r for r in rows if r["NodeName"]], ""  # cluster-wide events (no node) say nothing here
