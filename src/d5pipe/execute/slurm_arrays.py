"""Job arrays that lose no job: how d5pipe drives snakemake-executor-plugin-slurm's array mode.

The plugin (2.8.0, upstream issue #473) submits a rule's ready jobs as one array only when
Snakemake hands it *every* ready job of that rule in one call; a smaller batch is dropped without
a word, and its jobs have already taken Snakemake's ``--jobs`` slots -- a stage with more shards
than ``--jobs`` then waits forever. Two Snakemake limits cut batches short: ``--jobs`` and
``--max-jobs-per-timespan`` (100 per second by default). So, under SLURM with arrays on:

* Snakemake gets room for every job of the run at once (``--jobs`` and
  ``--max-jobs-per-timespan`` of at least the planned jobs): each stage's ready shards reach the
  executor in one call;
* d5pipe's executor (d5pipe.execute.slurm_executor) submits them in arrays numbered from 1, under
  the site's limits, and keeps the run's tasks in flight, across stages and arrays, at
  ``executor.jobs``: array stages are submitted with ``--begin=now+10``, and the executor sets the
  array's ``ArrayTaskThrottle`` (at most ``executor.array_throttle`` where that is set) before it
  moves the start to now;
* jobs that are not arrays (level 3, node-placed stages) each take one of ``executor.jobs`` slots
  of the Snakemake resource :data:`SLOTS` as well.

The limits reach the executor as Snakemake config (``--config``) because ``d5pipe run --jobs``
may differ from the run's ``executor.jobs``.
"""

from __future__ import annotations

from typing import Any

from d5pipe.config.schema import ExecutorConf
from d5pipe.core.fields import setting

SLOTS = "d5pipe_slurm_jobs"
"""Snakemake resource that counts the run's non-array SLURM jobs in flight."""
THROTTLE_KEY = "d5pipe_array_throttle"
"""Snakemake config key with the tasks of one array that may run at once (0: no cap of its own)."""
FLIGHT_KEY = "d5pipe_slurm_flight"
"""Snakemake config key with the run's tasks in flight, across stages (``executor.jobs``)."""
POLL_KEY = "d5pipe_slurm_poll_s"
"""Snakemake config key with the seconds between the executor's looks at the queue."""


def arrays_on(executor: dict[str, Any]) -> bool:
    """Whether the SLURM executor submits array jobs (``executor.arrays``)."""
    return executor.get("name") == "slurm" and bool(setting(executor, ExecutorConf, "arrays"))


def jobs_in_flight(executor: dict[str, Any], jobs: int | None = None) -> int:
    """``d5pipe run --jobs`` or else ``executor.jobs``."""
    return int(jobs if jobs is not None else setting(executor, ExecutorConf, "jobs"))


def scheduler_jobs(executor: dict[str, Any], planned_jobs: int, jobs: int | None = None) -> int:
    """Snakemake's ``--jobs``: every planned job at once with arrays on, else the jobs in flight."""
    flight = jobs_in_flight(executor, jobs)
    return max(flight, planned_jobs) if arrays_on(executor) else flight


def scheduler_args(executor: dict[str, Any], planned_jobs: int, jobs: int | None = None) -> list[str]:
    """Snakemake arguments besides ``--jobs`` that keep array batches whole and tell d5pipe's
    executor the run's limits (module docstring)."""
    if executor.get("name") != "slurm":
        return []
    flight = jobs_in_flight(executor, jobs)
    limits = ["--config", f"{THROTTLE_KEY}={int(setting(executor, ExecutorConf, 'array_throttle'))}",
              f"{FLIGHT_KEY}={flight}", f"{POLL_KEY}={float(setting(executor, ExecutorConf, 'poll_s')):g}"]
    if not arrays_on(executor):
        return limits
    room = scheduler_jobs(executor, planned_jobs, jobs)
    return ["--max-jobs-per-timespan", f"{room}/1s", "--resources", f"{SLOTS}={flight}", *limits]
