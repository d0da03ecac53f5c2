"""Never a silent wait under SLURM: stop a run in which nothing can happen any more.

Snakemake can wait for SLURM while SLURM holds nothing of the run: jobs the SLURM plugin dropped
before submitting them (snakemake-executor-plugin-slurm #473, see d5pipe.execute.slurm_arrays),
or an ``sbatch`` that answered with a job ID SLURM never knew. Every ``poll_s`` the
:class:`Watchdog` looks at

* the *pending* shards: planned shards without their completion marker;
* the *active* jobs: jobs of the run that have not finished -- pending, held, running or
  completing -- from the executor's view of the run (d5pipe.execute.slurm_status.Feed: the jobs it
  waits for and the scheduler's last answer), or from ``squeue`` (working directory: the run
  directory) when that view is stale;
* *progress*: the markers, the point records and the states of the run's jobs.

While shards are pending and no job of the run is active it says so once a minute
(:meth:`Watchdog.check` returns the line), and when nothing has changed for ``stall_s`` it raises
:class:`Stalled`, one line naming the pending shards; the driver then stops Snakemake and the run
exits :data:`STALLED_EXIT` (re-run the same command to resume; finished points are kept).

``stall_s`` (``executor.watchdog_s``, 300 s) must exceed the longest quiet stretch of a healthy
run: the plugin notices a finished job at its next status check (at most every 180 s), and only
then submits the next stage.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from d5pipe.core.errors import D5PipeError
from d5pipe.execute.slurm import SlurmJob
from d5pipe.rundir.layout import RunDir

STALLED_EXIT = 75
"""Exit code of a run stopped because SLURM holds none of its pending jobs (EX_TEMPFAIL: re-run)."""
NOTICE_EVERY_S = 60.0
SHOWN = 8
"""Pending shards named in the one-line error (then "and N more")."""


class Stalled(D5PipeError):
    """Shards are pending, SLURM has no job of the run, and nothing changed for ``stall_s``."""

    exit_code = STALLED_EXIT


def pending_shards(rd: RunDir) -> list[str]:
    """``"<stage> <shard>"`` of every planned shard without its completion marker."""
    out = []
    for stage in rd.stages():
        try:
            done = {n[:-len(".json")] for n in os.listdir(rd.marker(stage, "x").parent) if n.endswith(".json")}
        except FileNotFoundError:
            done = set()
        out += [f"{stage} {name}" for name in rd.shards(stage) if name not in done]
    return out


def _shown(items: Sequence[str]) -> str:
    head = ", ".join(items[:SHOWN])
    return head + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


@dataclass
class Watchdog:
    """See the module docstring. ``list_jobs``: the run's SLURM jobs (raises D5PipeError when squeue
    does not answer); ``waiting_for``: SLURM IDs Snakemake still waits for (d5pipe.execute.slurm_watch)."""

    rd: RunDir
    list_jobs: Callable[[], list[SlurmJob]]
    stall_s: float = 300.0
    poll_s: float = 10.0
    waiting_for: Callable[[], Iterable[str]] = lambda: ()
    clock: Callable[[], float] = time.monotonic
    _last_poll: float | None = None
    _signature: tuple[object, ...] | None = None
    _quiet_since: float | None = None
    _noticed: int = 0

    def _progress(self, jobs: list[SlurmJob], pending: list[str]) -> tuple[object, ...]:
        records = sum(len(self.rd.existing_records(stage)) for stage in self.rd.stages())
        return (tuple(pending), records, tuple(sorted((j.job_id, j.state) for j in jobs)))

    def check(self) -> str | None:
        """Poll when due; a console line while the run is quiet; :class:`Stalled` when it is stuck."""
        now = self.clock()
        if self._last_poll is not None and now - self._last_poll < self.poll_s:
            return None
        self._last_poll = now
        pending = pending_shards(self.rd)
        try:
            jobs = self.list_jobs()
        except D5PipeError:
            return None  # squeue not answering is d5pipe.execute.slurm_watch's to judge
        active = [j for j in jobs if not j.finished]
        signature = self._progress(jobs, pending)
        if not pending or active or signature != self._signature:
            self._signature = signature
            self._quiet_since = now if pending and not active else None
            self._noticed = 0
            return None
        assert self._quiet_since is not None
        quiet = now - self._quiet_since
        if quiet > self.stall_s:
            unknown = sorted(set(self.waiting_for()) - {j.job_id for j in jobs})
            lost = f"; Snakemake still waits for SLURM job(s) {_shown(unknown)} that SLURM does not know" \
                if unknown else ""
            raise Stalled(
                f"executor slurm: no job of this run in SLURM and no progress for {quiet:.0f} s "
                f"(executor.watchdog_s={self.stall_s:g}) while {len(pending)} shard(s) are pending, never "
                f"submitted or lost by SLURM: {_shown(pending)}{lost}; the run stops here -- run the same "
                "command again to resume (finished points are kept)")
        if quiet >= NOTICE_EVERY_S * (self._noticed + 1):
            self._noticed = int(quiet // NOTICE_EVERY_S)
            return (f"d5pipe: no job of this run in SLURM for {quiet:.0f} s; {len(pending)} shard(s) pending "
                    f"(the run stops if nothing moves for {self.stall_s:g} s)")
        return None
