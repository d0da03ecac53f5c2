"""d5pipe's SLURM executor: snakemake-executor-plugin-slurm's, held to the site's limits and to one
run-wide limit on tasks in flight, with a load on the scheduler that does not grow with the jobs.

d5pipe's Snakemake process (d5pipe.execute.snakemake_main) registers this module under the plugin's
name ``slurm``; a plain ``snakemake --executor slurm`` still gets the plugin as it is. What it adds:

* **Arrays numbered from 1 in every chunk.** The plugin numbers the tasks of one call 1..N and
  submits ``--array=1001-2000`` for the second thousand, which a site with the default
  ``MaxArraySize=1001`` rejects. Here each chunk of at most ``MaxArraySize - 1`` tasks
  (d5pipe.execute.slurm_limits.SiteLimits.array_chunk) is a call of its own.
* **Waves.** A submission waits until it fits under ``MaxJobCount`` (every task in slurmctld,
  finished ones included for ``MinJobAge``) and the user's ``MaxSubmitJobs``.
* **One limit on the run's tasks in flight** (``executor.jobs``), across stages and arrays. At most
  one array of the run has tasks that have not started (the *filling* array); its
  ``ArrayTaskThrottle`` is what the limit leaves after every other array's running tasks and the
  run's non-array jobs. Those only decrease, so the throttle is only ever raised, and the sum stays
  under the limit. Array stages are submitted with ``--begin=now+N``
  (d5pipe.execute.snakefile_api.THROTTLE_GRACE_S); the throttle is set first, then the begin time
  is moved to now.
* **Arrays of any size the site allows.** The plugin sends every task's Snakemake command line,
  compressed, in the array's one ``sbatch`` call and in the command line of every task; a command
  line over the kernel's 128 KiB argument limit makes it fall back to a script that loses the
  tasks' commands (every task of the array then ran the first task's shard). Here a job's command
  is a script of its own (``.snakemake/d5j/<hash>``, written once), its command line ``sh`` of
  that script, and a chunk is cut so the call stays under
  d5pipe.execute.slurm_limits.WRAP_BUDGET bytes (``SiteLimits.array_chunk``).
* **A bounded load on the scheduler.** The limits are read once per run (one ``scontrol show
  config``, one ``sacctmgr``) and the plugin's own probes answer from them (it ran ``scontrol show
  config`` at import, at start and in every status round). What this executor knows of the queue
  comes from one ``squeue`` per :attr:`Flight.poll_s` for the whole run, and only while a
  submission waits or a throttle may rise. No job asks the controller anything (below).
* **No Snakemake inside a shard's job.** The plugin's array task ran three Snakemake processes
  (the array's first job's, to read the payload; the task's own; and one under ``srun -n1`` that
  runs the rule): each builds the DAG, and they cost more than a short shard itself. A shell
  rule's job script runs the rule's command directly (d5pipe.execute.slurm_job_scripts.direct_body; an array task's
  command comes from d5pipe.execute.slurm_task); the driver's Snakemake, in its default mode,
  checks the outputs and records the metadata and incomplete markers itself. Other jobs (the
  dataset's script rule) run ``python -m d5pipe.execute.snakemake_job``, which loads only
  d5pipe's job-step executor (d5pipe.execute.slurm_jobstep), not the SLURM plugin.
"""

from __future__ import annotations

import asyncio
import getpass
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import snakemake_executor_plugin_slurm as plugin
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings  # noqa: F401 - the plugin's interface

from d5pipe.execute.slurm import slurm_answer, slurm_tool
from d5pipe.execute.slurm_job_scripts import direct_body, job_script, rule_shell, snakemake_body
from d5pipe.execute.slurm_limits import SiteLimits, read_limits
from d5pipe.execute.snakemake_job import job_command
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.slurm_events import Outage, record

__all__ = ["Executor", "ExecutorSettings", "common_settings", "Flight", "QueueView", "parse_queue"]

ACTIVE = frozenset({"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED",
                    "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})
"""squeue states of a job that still counts towards ``MaxSubmitJobs`` and the run's limit."""
QUEUE_FORMAT = "%F|%K|%T|%j|%u"
POLL_S = 10.0


@dataclass
class QueueView:
    """What one ``squeue -r -t all`` says, for the run named ``name`` and the user ``user``."""

    controller_jobs: int = 0
    """Every job and array task slurmctld holds (what ``MaxJobCount`` counts)."""
    user_active: int = 0
    """The user's pending and running jobs and tasks (what ``MaxSubmitJobs`` counts)."""
    pending: dict[str, int] = field(default_factory=dict)
    """Array job ID -> tasks of the run not started yet."""
    running: dict[str, int] = field(default_factory=dict)
    """Array job ID -> tasks of the run started and not finished."""
    singles: int = 0
    """The run's non-array jobs, pending or running."""

    @property
    def filling(self) -> str | None:
        """The run's array with tasks not started yet (at most one; see the module docstring)."""
        return next((a for a, n in self.pending.items() if n > 0), None)


def parse_queue(text: str, name: str, user: str) -> QueueView:
    """A :class:`QueueView` from ``squeue -h -r -t all -o '%F|%K|%T|%j|%u'`` lines."""
    view = QueueView()
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5:
            continue
        array_id, task, state, job_name, job_user = parts
        view.controller_jobs += 1
        active = state in ACTIVE
        if active and job_user == user:
            view.user_active += 1
        if job_name != name or not active:
            continue
        if task in ("N/A", ""):
            view.singles += 1
        elif state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
            view.pending[array_id] = view.pending.get(array_id, 0) + 1
        else:
            view.running[array_id] = view.running.get(array_id, 0) + 1
    return view


class Flight:
    """Admits the run's submissions under the site's limits and the run-wide limit (module docstring).

    ``query`` returns squeue's text; ``update`` runs ``scontrol update`` arguments. Both are
    called with :attr:`lock` held, so a submission never races a snapshot of the queue.
    """

    def __init__(self, limits: SiteLimits, limit: int, name: str, query: Callable[[], str | None],
                 update: Callable[[list[str]], None], poll_s: float = POLL_S, user: str | None = None,
                 array_cap: int = 0, say: Callable[[str], None] = lambda _m: None,
                 waited: Callable[[int, str, float], None] = lambda _n, _why, _s: None) -> None:
        self.limits, self.limit, self.name = limits, max(1, int(limit)), name
        self.query, self.update, self.poll_s, self.say, self.waited = query, update, float(poll_s), say, waited
        self.user = user or getpass.getuser()
        self.array_cap = int(array_cap)
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.view = QueueView()
        self.throttle: dict[str, int] = {}
        """Filling array -> the ArrayTaskThrottle set on it."""
        self.sizes: dict[str, int] = {}
        """Array -> its tasks."""
        self._at = -float("inf")
        self.why = ""
        self._waiting_said = ""

    # ---------------------------------------------------------------- the queue
    def refresh(self) -> QueueView:
        """The queue as of at most :attr:`poll_s` ago (one squeue when older)."""
        with self.lock:
            if time.monotonic() - self._at >= self.poll_s:
                text = self.query()
                self._at = time.monotonic()
                if text is not None:
                    self.view = parse_queue(text, self.name, self.user)
            return self.view

    def used(self, view: QueueView) -> int:
        """Slots of the run's limit taken: running array tasks, the filling array's throttle, singles."""
        filling = view.filling
        taken = sum(n for a, n in view.running.items() if a != filling) + view.singles
        if filling is not None:
            taken += max(self.throttle.get(filling, self.limit), view.running.get(filling, 0))
        return taken

    def _room(self, view: QueueView, tasks: int, array: bool) -> str | None:
        """Why ``tasks`` more may not be submitted now (None: they may)."""
        if view.controller_jobs + tasks > self.limits.job_room:
            return (f"MaxJobCount={self.limits.max_job_count}: {view.controller_jobs} jobs in slurmctld, "
                    f"{tasks} more would pass the {self.limits.job_room} d5pipe uses")
        if view.user_active + tasks > self.limits.submit_room:
            return f"MaxSubmitJobs: {view.user_active} of the user's jobs pending or running, {tasks} more would pass {self.limits.submit_room}"
        if array and view.filling is not None:
            return f"array {view.filling} still has {view.pending[view.filling]} task(s) waiting to start"
        if self.limit - self.used(view) < 1:
            return f"executor.jobs={self.limit} tasks of the run in flight"
        return None

    # ----------------------------------------------------------- admission
    def admit_now(self, tasks: int, array: bool) -> bool:
        """Whether ``tasks`` may be submitted now; True returns with :attr:`lock` held (the caller
        submits, calls :meth:`submitted` and releases it), False says why in :attr:`why`."""
        self.lock.acquire()
        why = self._room(self.refresh(), tasks, array)
        if why is None:
            return True
        self.lock.release()
        self.why = why
        return False

    def admit(self, tasks: int, array: bool) -> bool:
        """Wait until ``tasks`` may be submitted (:meth:`admit_now`); False once stopped. A wait
        is told to ``waited`` (tasks, the first reason, seconds) once it ends."""
        t0, first = time.monotonic(), ""
        while not self.admit_now(tasks, array):
            first = first or self.why
            if self.why != self._waiting_said:
                self.say(f"d5pipe: waiting to submit {tasks} task(s): {self.why}")
                self._waiting_said = self.why
            if self.stopped.wait(self.poll_s):
                return False
        if first:
            self.waited(tasks, first, time.monotonic() - t0)
        return True

    def submitted(self, array_id: str | None, tasks: int) -> None:
        """Count a submission just made (lock held) and set a new array's throttle and start."""
        view = self.view
        view.controller_jobs += tasks
        view.user_active += tasks
        if array_id is None:
            view.singles += tasks
            return
        free = self.limit - self.used(view)
        view.pending[array_id] = tasks
        self.sizes[array_id] = tasks
        throttle = min(tasks, free, self.array_cap or tasks)
        if throttle < tasks:
            self.update([f"JobId={array_id}", f"ArrayTaskThrottle={throttle}"])
        self.throttle[array_id] = throttle
        self.update([f"JobId={array_id}", "StartTime=now"])

    def raise_throttle(self) -> None:
        """Give the filling array what the others have freed (one squeue at most per poll)."""
        with self.lock:
            view = self.refresh()
            filling = view.filling
            if filling is None:
                self.throttle.clear()  # every task has started: nothing to raise until the next array
                return
            if filling not in self.throttle:
                return
            current = self.throttle[filling]
            others = self.used(view) - max(current, view.running.get(filling, 0))
            want = view.pending[filling] + view.running.get(filling, 0)
            new = min(self.limit - others, want, self.array_cap or want)
            if new > current:
                self.update([f"JobId={filling}", f"ArrayTaskThrottle={new}"])
                self.throttle[filling] = new

    def busy(self) -> bool:
        """Whether a throttle may still rise: a filling array is known whose throttle is below what
        it could have (its tasks, the run's limit, ``array_cap``). One array that already holds the
        whole limit needs no look at the queue until the next submission."""
        return any(t < min(self.sizes.get(a, t), self.limit, self.array_cap or self.limit)
                   for a, t in self.throttle.items())


def scontrol_update(args: list[str]) -> None:
    slurm_tool(["scontrol", "update", *args], 20.0)


def squeue_all() -> str | None:
    """Every job and array task slurmctld holds (:data:`QUEUE_FORMAT`); None when squeue does not answer."""
    proc = slurm_answer(["squeue", "-h", "-r", "-t", "all", "-o", QUEUE_FORMAT], 30.0)
    return proc.stdout if proc is not None and proc.returncode == 0 else None


def share_limits(limits: SiteLimits) -> None:
    """Let the plugin's own probes answer from ``limits`` instead of asking slurmctld each time."""
    import snakemake_executor_plugin_slurm.job_status_query as status_query
    import snakemake_executor_plugin_slurm.validation as validation

    plugin.get_max_array_size = lambda: limits.max_array_size - 1
    for module in (plugin, validation, status_query):
        module.get_min_job_age = lambda: limits.min_job_age


class Executor(plugin.Executor):
    """The plugin's executor with d5pipe's limits (module docstring)."""

    def __post_init__(self, test_mode: bool = False) -> None:
        self.events = RunDir.of(".").slurm_events_log  # Snakemake runs in the run directory
        self.status_outage = Outage(self.events, "status", "the job status query")  # before the status loop asks
        self.site_limits = read_limits()
        share_limits(self.site_limits)
        super().__post_init__(test_mode)
        self.max_array_size = self.site_limits.array_chunk(int(self.workflow.executor_settings.array_limit))
        config: dict[str, Any] = dict(getattr(self.workflow, "config", {}) or {})
        from d5pipe.execute.slurm_arrays import FLIGHT_KEY, POLL_KEY, THROTTLE_KEY

        controller = Outage(self.events, "controller", "slurmctld (squeue)")

        def query() -> str | None:
            text = squeue_all()
            controller.saw(text is not None)
            return text

        def waited(tasks: int, why: str, seconds: float) -> None:
            record(self.events, "wait", "waited", f"{tasks} task(s) waited {seconds:.0f} s to be submitted: {why}",
                   waited_s=round(seconds, 1), tasks=tasks)

        self.flight = Flight(self.site_limits, int(config.get(FLIGHT_KEY, 100)), self.run_uuid, query,
                             scontrol_update, poll_s=float(config.get(POLL_KEY, POLL_S)),
                             array_cap=int(config.get(THROTTLE_KEY, 0)), say=self.logger.info, waited=waited)
        self.logger.info(f"d5pipe: SLURM site limits: {self.site_limits.describe()}; arrays of at most "
                         f"{self.max_array_size} tasks; at most {self.flight.limit} tasks of the run in flight")
        self._collected = threading.local()
        self._raiser = threading.Thread(target=self._raise_loop, name="d5pipe-throttle", daemon=True)
        self._raiser.start()

    def _raise_loop(self) -> None:
        while not self.flight.stopped.wait(self.flight.poll_s):
            if self.flight.busy():
                try:
                    self.flight.raise_throttle()
                except Exception as exc:  # noqa: BLE001 - a missed round is retried next poll
                    self.logger.warning(f"d5pipe: could not raise an array's throttle: {exc}")

    def format_job_exec(self, job: Any) -> str:
        """``sh`` of the job's script (d5pipe.execute.slurm_job_scripts): a shell rule's command run directly
        (``direct_body``), else the plugin's job command run by d5pipe.execute.snakemake_job
        (no SLURM plugin loaded)."""
        direct = rule_shell(job)
        if direct is not None:
            return job_script(direct_body(*direct))
        return job_script(snakemake_body(job_command(str(super().format_job_exec(job)))))

    def _report_job_submission_threadsafe(self, job_info: Any) -> None:
        ids = getattr(self._collected, "ids", None)
        if ids is not None:
            ids.append(str(job_info.external_jobid))
        super()._report_job_submission_threadsafe(job_info)

    def run_array_jobs(self, jobs: list[Any]) -> None:
        size = max(1, int(self.max_array_size))
        for start in range(0, len(jobs), size):
            chunk = jobs[start:start + size]
            if not self.flight.admit(len(chunk), array=True):
                return
            try:
                self._collected.ids = []
                super().run_array_jobs(chunk)  # one sbatch: --array=1-len(chunk)
                ids = self._collected.ids
                if ids:
                    self.flight.submitted(ids[0].split("_", 1)[0], len(chunk))
            finally:
                self._collected.ids = None
                self.flight.lock.release()

    def run_job(self, job: Any) -> None:
        if not self.flight.admit(1, array=False):
            return
        try:
            super().run_job(job)
            self.flight.submitted(None, 1)
        finally:
            self.flight.lock.release()

    async def check_active_jobs(self, active_jobs: list[Any]) -> Any:
        """The plugin's status round; an outage of the query and its end go to the run's SLURM event
        log, and a round whose query failed keeps every job active (the plugin's own yields none of
        them: on 128 nodes with slurmdbd stopped for two minutes the run then waited forever)."""
        def counts() -> tuple[int, int]:  # the plugin sets them in __post_init__, after its status loop started
            return getattr(self, "_status_query_calls", 0), getattr(self, "_status_query_failures", 0)

        before = counts()
        kept: set[int] = set()
        async for job in super().check_active_jobs(active_jobs):
            kept.add(id(job))
            yield job
        after = counts()
        if after != before:
            answered = after[0] > before[0]
            self.status_outage.saw(answered)
            if not answered:  # the plugin yields nothing for a round whose query failed: every job would
                for job in active_jobs:  # drop out of Snakemake's sight and the run wait forever
                    if id(job) not in kept:
                        yield job

    async def sleep(self) -> None:
        """The plugin's pause between status rounds (up to a minute), ended early once Snakemake
        shuts the executor down: the run ends when its last job does, not a status round later."""
        end = time.monotonic() + float(self.next_seconds_between_status_checks or 0)
        while self.wait and time.monotonic() < end:
            await asyncio.sleep(min(0.5, max(0.0, end - time.monotonic())))

    def cancel(self) -> None:
        self.flight.stopped.set()
        super().cancel()

    def shutdown(self) -> None:
        self.flight.stopped.set()
        super().shutdown()
