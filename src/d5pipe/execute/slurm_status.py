"""How a d5pipe run learns that its SLURM jobs ended, with one status query per round for the
whole run and rounds that grow apart: the scheduler is asked only what the file system cannot say.

* **Exit files.** Each job's script (d5pipe.execute.slurm_job_scripts) writes ``<script>.rc`` --
  ``"<SLURM job ID> <exit code>"`` -- when its command ends, atomically; the executor deletes it
  before it submits the job. Every :data:`LOCAL_S` d5pipe's executor reads the files of the jobs it
  waits for (no scheduler call): exit 0 under the job's own SLURM ID is a success at once; any
  other code asks the scheduler at once (a requeued task's first attempt can end 143 and then
  succeed), so what SLURM says decides. This is how Nextflow's grid executors learn of a job's end
  (its ``.exitcode`` file) while they poll the queue once a minute.
* **The scheduler** -- the plugin's own round, one ``sacct --name <run>`` (or ``squeue``) for the
  whole run -- is asked for what no file says: a job killed with its node (NODE_FAIL), by its time
  limit or by hand, a job SLURM lost. :class:`Schedule` spaces the rounds: the first after the
  profile's ``slurm-init-seconds-before-status-checks``, each next one :attr:`Schedule.step_s`
  later than the last, up to :attr:`Schedule.max_s` (the plugin's own cap, 180 s).
* **One view for the driver.** After each round the executor writes :class:`Feed` -- the SLURM
  IDs it waits for and the last answer of the scheduler -- to ``logs/slurm_status.json``; the
  driver's watch (d5pipe.execute.slurm_watch, d5pipe.execute.slurm_watchdog) reads it instead of
  asking SLURM itself, and asks only when the feed is stale (a hung executor, a failing query).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import write_text

LOCAL_S = 2.0
"""Seconds between two reads of the exit files (the executor's round; no scheduler call)."""
MAX_S = 600.0
"""The longest pause between two ``sacct`` queries (submitit's: a sweep's queries grow with the log of
its length, not with its jobs or its minutes)."""
WRITTEN_STALE_S = 120.0
"""A feed not rewritten for this long is a hung executor (it writes every 30 s): the driver asks SLURM itself."""
ANSWER_STALE_S = 2 * MAX_S + 60.0
"""A feed whose last scheduler answer is older than this: the query fails (an outage); the driver asks squeue."""
GRACE_S = 30.0
"""A job the executor waits for counts as unknown to SLURM only in an answer at least this long
after the executor first waited for it (slurmdbd lists a new job after a moment)."""
SCHEMA_VERSION = 1


@dataclass
class Schedule:
    """When the next scheduler query is due: ``first_s`` after the start, then each pause
    ``factor`` times the last, up to ``max_s``; :meth:`hurry` makes one due now."""

    first_s: float
    max_s: float = MAX_S
    factor: float = 2.0
    every_s: float = 0.0
    next_at: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.every_s = min(self.first_s, self.max_s)
        self.next_at = time.monotonic() + self.every_s

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def asked(self, now: float) -> None:
        """A query was made at ``now``: the next one is ``factor`` times further away."""
        self.every_s = min(self.max_s, max(self.every_s, 1.0) * self.factor)
        self.next_at = now + self.every_s

    def hurry(self) -> None:
        self.next_at = 0.0

    def by(self, when: float) -> None:
        """A query is due no later than ``when`` (a new submission is confirmed :data:`GRACE_S` after it)."""
        self.next_at = min(self.next_at, when)


def read_exit(path: Path) -> tuple[str, int] | None:
    """``(SLURM job ID, exit code)`` from an exit file; None while the job has not ended."""
    try:
        job_id, code = path.read_text(encoding="utf-8").split()
        return job_id, int(code)
    except (OSError, ValueError):
        return None


def base_ids(job_id: str) -> tuple[str, ...]:
    """``123_4`` and ``123`` for an array task (sacct lists a task under its array's ID or its own)."""
    head = job_id.split("_", 1)[0]
    return (job_id, head) if head != job_id else (job_id,)


@dataclass
class Feed:
    """What the executor knows: the SLURM IDs it waits for, and the scheduler's last answer."""

    written: float
    """Wall-clock time of this view (``time.time()``)."""
    waiting: list[str]
    answered: float | None = None
    """Wall-clock time of the last scheduler answer; None before the first."""
    states: dict[str, str] = field(default_factory=dict)
    """SLURM job ID -> state in that answer."""
    since: dict[str, float] = field(default_factory=dict)
    """SLURM job ID -> wall-clock time the executor first waited for it (the IDs of ``waiting``)."""

    def usable(self, started: float, now: float | None = None) -> bool:
        """Whether the driver may rely on this view of a run started at ``started`` (wall clock):
        written by this run in the last :data:`WRITTEN_STALE_S`, with a scheduler answer (or the
        run's start) at most :data:`ANSWER_STALE_S` old; else the driver asks SLURM itself."""
        now = time.time() if now is None else now
        last = self.answered if self.answered is not None else started
        return self.written >= started and now - self.written < WRITTEN_STALE_S and now - last < ANSWER_STALE_S

    def jobs(self) -> list[tuple[str, str]]:
        """``(SLURM job ID, state)`` of every job the view knows: those the executor waits for
        (PENDING until the scheduler has said more; left out when :meth:`lost`) and those the last
        answer listed."""
        out = {i: next((self.states[b] for b in base_ids(i) if b in self.states), "PENDING")
               for i in self.waiting if not self.lost(i)}
        return sorted({**self.states, **out}.items())

    def known(self, job_id: str) -> bool:
        return any(i in self.states for i in base_ids(job_id))

    def lost(self, job_id: str) -> bool:
        """Whether the last answer, taken :data:`GRACE_S` or more after the executor first waited for
        the job, does not list it: SLURM does not know the job (an ``sbatch`` that answered an ID
        SLURM never held)."""
        return (self.answered is not None and not self.known(job_id)
                and self.answered >= self.since.get(job_id, self.written) + GRACE_S)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"schema_version": SCHEMA_VERSION, "written": self.written, "waiting": self.waiting,
                "answered": self.answered, "states": self.states, "since": self.since}
        write_text(path, json.dumps(body, sort_keys=True) + "\n", durable=False)

    @classmethod
    def read_usable(cls, path: Path, started: float, now: float | None = None) -> Feed | None:
        """The feed at ``path`` when :meth:`usable` for a run started at ``started``; an empty one
        while this run's executor has not written yet (for up to :data:`WRITTEN_STALE_S`: it writes
        at its first round, before it submits anything); else None."""
        now = time.time() if now is None else now
        feed = cls.read(path)
        if feed is not None and feed.usable(started, now):
            return feed
        if (feed is None or feed.written < started) and now - started < WRITTEN_STALE_S:
            return cls(now, [])
        return None

    @classmethod
    def read(cls, path: Path) -> Feed | None:
        """The feed at ``path``; None when there is none (or it cannot be read: the driver asks SLURM)."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return cls(float(raw["written"]), [str(i) for i in raw["waiting"]],
                       None if raw.get("answered") is None else float(raw["answered"]),
                       {str(k): str(v) for k, v in dict(raw.get("states") or {}).items()},
                       {str(k): float(v) for k, v in dict(raw.get("since") or {}).items()})
        except (OSError, ValueError, KeyError, TypeError):
            return None
