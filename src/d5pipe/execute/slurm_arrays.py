"""Job arrays that lose no job: how d5pipe drives snakemake-executor-plugin-slurm's array mode.

The plugin (2.8.0, upstream issue #473) submits a rule's ready jobs as one array only when
Snakemake hands it *every* ready job of that rule in one call; a smaller batch is dropped without
a word, and its jobs have already taken Snakemake's ``--jobs`` slots -- a stage with more shards
than ``--jobs`` then waits forever. Two Snakemake limits cut batches short: ``--jobs`` and
``--max-jobs-per-timespan`` (100 per second by default). So, under SLURM with arrays on:

* Snakemake gets room for every job of the run at once (``--jobs`` and
  ``--max-jobs-per-timespan`` of at least the planned jobs): each stage's ready shards reach the
  plugin in one call and go out as ``ceil(shards / executor.array_limit)`` arrays;
* SLURM limits what runs: each array's ``ArrayTaskThrottle`` is ``executor.array_throttle``, or
  else ``executor.jobs`` (the driver sets it when the array's ID appears; an array stage with more
  shards than that is submitted with ``--begin=now+10`` so that no task starts before);
* jobs that are not arrays (level 3, node-placed stages) each take one of ``executor.jobs`` slots
  of the Snakemake resource :data:`SLOTS`, so at most that many are in flight, as before.

The throttle reaches the rules as Snakemake config (``--config``) because ``d5pipe run --jobs``
may differ from the run's ``executor.jobs``.
"""

from __future__ import annotations

from typing import Any

from d5pipe.config.schema import ExecutorConf
from d5pipe.core.fields import setting

SLOTS = "d5pipe_slurm_jobs"
"""Snakemake resource that counts the run's non-array SLURM jobs in flight."""
THROTTLE_KEY = "d5pipe_array_throttle"
"""Snakemake config key with the tasks of one array that may run at once."""


def arrays_on(executor: dict[str, Any]) -> bool:
    """Whether the SLURM executor submits array jobs (``executor.arrays``)."""
    return executor.get("name") == "slurm" and bool(setting(executor, ExecutorConf, "arrays"))


def jobs_in_flight(executor: dict[str, Any], jobs: int | None = None) -> int:
    """``d5pipe run --jobs`` or else ``executor.jobs``."""
    return int(jobs if jobs is not None else setting(executor, ExecutorConf, "jobs"))


def array_throttle(executor: dict[str, Any], jobs: int | None = None) -> int:
    """Tasks of one array that may run at once: ``executor.array_throttle``, else the jobs in flight."""
    explicit = int(setting(executor, ExecutorConf, "array_throttle"))
    return explicit if explicit > 0 else jobs_in_flight(executor, jobs)


def scheduler_jobs(executor: dict[str, Any], planned_jobs: int, jobs: int | None = None) -> int:
    """Snakemake's ``--jobs``: every planned job at once with arrays on, else the jobs in flight."""
    flight = jobs_in_flight(executor, jobs)
    return max(flight, planned_jobs) if arrays_on(executor) else flight


def scheduler_args(executor: dict[str, Any], planned_jobs: int, jobs: int | None = None) -> list[str]:
    """Snakemake arguments besides ``--jobs`` that keep array batches whole (module docstring)."""
    if not arrays_on(executor):
        return []
    room = scheduler_jobs(executor, planned_jobs, jobs)
    return ["--max-jobs-per-timespan", f"{room}/1s",
            "--resources", f"{SLOTS}={jobs_in_flight(executor, jobs)}",
            "--config", f"{THROTTLE_KEY}={array_throttle(executor, jobs)}"]


def needs_begin(executor: dict[str, Any], shards: int, throttle: int | None) -> bool:
    """Whether an array stage of ``shards`` jobs is submitted with ``--begin`` (throttle first)."""
    if not arrays_on(executor):
        return False
    limit = int(throttle) if throttle is not None else array_throttle(executor)
    return int(setting(executor, ExecutorConf, "array_throttle")) > 0 or shards > limit
