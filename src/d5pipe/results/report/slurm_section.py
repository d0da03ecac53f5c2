"""The report's SLURM section: what each shard job used (sacct) and how efficiently.

Read from ``accounting.parquet`` (d5pipe.results.accounting, written by the report job): per job
its state, nodes, elapsed time, CPU efficiency (CPU time / (elapsed x allocated CPUs)), peak
resident memory and memory efficiency (MaxRSS / requested). Jobs that lost their node
(``NODE_FAIL``) are named first: their unfinished points ran again elsewhere. Above the table, what
happened to the run (``slurm_events.parquet``, d5pipe.results.slurm_incidents): nodes down,
slurmctld or accounting not answering, requeued jobs, submissions that waited for a limit.
"""

from __future__ import annotations

import pandas as pd

from d5pipe.results.report.blocks import Block, Section, Table, Text
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.units import number, quantity
from d5pipe.results.slurm_incidents import FAILED_STATES, incident_lines


def _pct(v: object) -> str:
    return "" if v is None or pd.isna(v) else f"{100 * float(v):.0f}%"  # type: ignore[arg-type]


def slurm_jobs(data: RunData) -> Section | None:
    """The efficiency table; None for a run that had no SLURM jobs."""
    path = data.res.run_dir.side_table("accounting")
    if not path.exists():
        return None
    acct = pd.read_parquet(path)
    blocks: list[Block] = []
    note = str(acct["note"].iloc[0]) if "note" in acct.columns and len(acct) else ""
    if acct.empty or "slurm_state" not in acct.columns:
        return Section("slurm", "SLURM jobs", [Text(f"No accounting data: {note or 'sacct had none'}.", "warn")])
    events = data.res.run_dir.side_table("slurm_events")
    if events.is_file():
        table = pd.read_parquet(events)
        head, *lines = incident_lines(table, limit=50)
        blocks.append(Text(head.removeprefix("slurm: ").capitalize() + ".", "warn" if lines else "note"))
        blocks += [Text(line.strip(), "warn") for line in lines]
    cpu = acct["slurm_cpu_efficiency"].dropna()
    mem = acct["slurm_mem_efficiency"].dropna()
    if len(cpu):
        blocks.append(Text(f"{len(acct)} job(s); CPU efficiency median {_pct(cpu.median())}, "
                           f"memory efficiency median {_pct(mem.median()) if len(mem) else 'n/a'}.", "note"))
    rows = [[str(r.slurm_job_id), str(r.slurm_state), str(r.slurm_nodes or ""),
             quantity(r.slurm_elapsed_s, "s"), number(float(r.slurm_alloc_cpus or 0), 3),
             _pct(r.slurm_cpu_efficiency), quantity(float(r.slurm_maxrss_mb or 0) * 2**20, "B"),
             _pct(r.slurm_mem_efficiency), str(int(getattr(r, "slurm_attempts", 1) or 1))]
            for r in acct.sort_values("slurm_job_id").itertuples(index=False)]
    blocks.append(Table(["job", "state", "nodes", "elapsed", "CPUs", "CPU eff.", "MaxRSS", "mem eff.", "runs"], rows,
                        "Shard jobs as sacct saw them", bad_rows={i for i, r in enumerate(rows) if r[1] in FAILED_STATES}))
    return Section("slurm", "SLURM jobs", blocks)
