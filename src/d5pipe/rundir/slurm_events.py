"""What a run's SLURM driver saw happen: ``logs/slurm_events.jsonl``, one JSON object per line.

d5pipe's SLURM executor (d5pipe.execute.slurm_executor) writes a line when slurmctld stops or
starts answering ``squeue`` again (``controller``), when the status queries (``sacct`` or
``squeue``) stop or start answering (``status``), and when a submission had to wait for a site
limit or the run's own limit (``wait``). Each line holds ``t`` (Unix seconds), ``kind``,
``state`` (``down``/``up`` for an outage, ``waited`` for a wait) and ``text``; an ``up`` line
also holds ``down_s``, how long the outage lasted. Lines are appended with one ``write`` each
(``O_APPEND``), so a line is whole or absent; a reader skips a torn last line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def record(log: Path, kind: str, state: str, text: str, **values: Any) -> None:
    """Append one event to ``log`` (the run's ``RunDir.slurm_events_log``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"t": round(time.time(), 3), "kind": kind, "state": state, "text": text, **values},
                      sort_keys=True, default=str) + "\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(log: Path) -> list[dict[str, Any]]:
    """The events of ``log``, oldest first (none when it does not exist)."""
    if not log.is_file():
        return []
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill mid-write
        if isinstance(event, dict) and "kind" in event:
            out.append(event)
    return out


class Outage:
    """Whether something answers, written to the log only when that changes."""

    def __init__(self, log: Path, kind: str, what: str) -> None:
        self.log, self.kind, self.what = log, kind, what
        self.since: float | None = None
        self.misses = 0

    def saw(self, answered: bool) -> None:
        """One attempt's outcome: a first miss opens an outage, the first answer after it closes it."""
        now = time.time()
        if not answered:
            self.misses += 1
            if self.since is None:
                self.since = now
                record(self.log, self.kind, "down", f"{self.what} did not answer")
            return
        if self.since is not None:
            down = now - self.since
            record(self.log, self.kind, "up", f"{self.what} answered again after {down:.0f} s "
                                              f"({self.misses} failed attempt(s))", down_s=round(down, 1),
                   misses=self.misses)
            self.since, self.misses = None, 0
