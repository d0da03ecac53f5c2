"""d5pipe's SLURM executor: snakemake-executor-plugin-slurm's, held to the site's limits and to one
run-wide limit on tasks in flight, with a load on the scheduler that does not grow with the jobs.

d5pipe's Snakemake process (d5pipe.execute.snakemake_main) registers this module under the plugin's
name ``slurm``; a plain ``snakemake --executor slurm`` still gets the plugin as it is. What it adds:

* **Arrays numbered from 1 in every chunk.** The plugin numbers the tasks of one call 1..N and
  submits ``--array=1001-2000`` for the second thousand, which a site with the default
  ``MaxArraySize=1001`` rejects. Here each chunk of at most ``MaxArraySize - 1`` tasks
  (d5pipe.execute.slurm_limits.SiteLimits.array_chunk) is a call of its own.
* **Waves.** A submission waits until it fits under ``MaxJobCount`` (every task in slurmctld,
  finished ones included for ``MinJobAge``) and the user's ``MaxSubmitJobs``. A stage larger than
  that room goes in arrays of half of it, so that waves overlap (``SiteLimits.array_chunk``); the
  wait for the filling array's last tasks to start is judged from the exit files while they say it
  cannot be over yet (``Flight.surely_filling``).
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
  config`` at import, at start and in every status round). A job's end is read from the exit file
  its script writes; the plugin's status query (one for the whole run) runs only for what no file
  says, in rounds that grow apart up to 10 minutes (d5pipe.execute.slurm_status), and its answer is the
  driver's view too. What the admission knows of the queue comes from one ``squeue`` per
  :attr:`~d5pipe.execute.slurm_flight.Flight.poll_s` for the whole run, and only while a
  submission waits or a throttle may rise (d5pipe.execute.slurm_flight). No job asks the
  controller anything (below).
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
import threading
import time
from pathlib import Path
from typing import Any

import snakemake_executor_plugin_slurm as plugin
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings  # noqa: F401 - the plugin's interface

from d5pipe.execute.slurm_flight import POLL_S, Flight, scontrol_update, squeue_all
from d5pipe.execute.slurm_job_scripts import direct_body, exit_file, job_script, rule_shell, snakemake_body
from d5pipe.execute.slurm_limits import SiteLimits, read_limits
from d5pipe.execute.slurm_status import GRACE_S, LOCAL_S, MAX_S, Feed, Schedule, read_exit
from d5pipe.execute.snakemake_job import job_command
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.slurm_events import Outage, record

_plugin_query = plugin.query_job_status
FEED_EVERY_S = 30.0

__all__ = ["Executor", "ExecutorSettings", "common_settings"]

def share_limits(limits: SiteLimits) -> None:
    """Let the plugin's own probes answer from ``limits`` instead of asking slurmctld each time."""
    import snakemake_executor_plugin_slurm.job_status_query as status_query
    import snakemake_executor_plugin_slurm.validation as validation

    plugin.get_max_array_size = lambda: limits.max_array_size - 1
    for module in (plugin, validation, status_query):
        module.get_min_job_age = lambda: limits.min_job_age


class Executor(plugin.Executor):
    """The plugin's executor with d5pipe's limits (module docstring)."""

    ready = False
    """Set at the end of :meth:`__post_init__`: Snakemake starts the status loop before it calls
    it, and a round that ran first died on the attributes set there (the loop's thread ended
    silently and the run waited forever for jobs that had finished)."""

    def __post_init__(self, test_mode: bool = False) -> None:
        rd = RunDir.of(".")  # Snakemake runs in the run directory
        self.events, self.feed_path = rd.slurm_events_log, rd.slurm_status_file
        self.exits: dict[int, Path] = {}
        """Snakemake job ID -> the exit file its script writes (d5pipe.execute.slurm_status)."""
        self.array_exits: dict[str, list[Path]] = {}
        """Array's SLURM ID -> its tasks' exit files."""
        self.failed_exits: set[tuple[Path, str]] = set()
        self.feed = Feed(0.0, ["-"])  # written at the first round
        self._fed_answer: float | None = None
        self.status_outage = Outage(self.events, "status", "the job status query")  # before the status loop asks
        self.site_limits = read_limits()
        share_limits(self.site_limits)
        super().__post_init__(test_mode)
        squeue = str(self.get_status_command()) == "squeue"
        age = self.site_limits.min_job_age  # squeue forgets a finished job after MinJobAge
        self.schedule = Schedule(float(self.workflow.executor_settings.init_seconds_before_status_checks or 40),
                                 max_s=max(LOCAL_S, min(MAX_S, age / 3)) if squeue and age else MAX_S)
        plugin.query_job_status = self._query_status  # the plugin's round calls it by this module-level name
        # no account given: sbatch without -A, SLURM's default account of the user (the plugin guessed
        # one from the user's last job, with a sacct of every job the user ran)
        self._fallback_account_arg = ""
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
                             array_cap=int(config.get(THROTTLE_KEY, 0)), say=self.logger.info, waited=waited,
                             finished=self._array_finished)
        self.logger.info(f"d5pipe: SLURM site limits: {self.site_limits.describe()}; arrays of at most "
                         f"{self.max_array_size} tasks; at most {self.flight.limit} tasks of the run in flight")
        self._collected = threading.local()
        self._raiser = threading.Thread(target=self._raise_loop, name="d5pipe-throttle", daemon=True)
        self._raiser.start()
        self.ready = True

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
            call = job_script(direct_body(*direct))
        else:
            call = job_script(snakemake_body(job_command(str(super().format_job_exec(job)))))
        self.exits[job.jobid] = exit_file(call)
        return call

    def _report_job_submission_threadsafe(self, job_info: Any) -> None:
        ids = getattr(self._collected, "ids", None)
        if ids is not None:
            ids.append(str(job_info.external_jobid))
        super()._report_job_submission_threadsafe(job_info)

    def _array_finished(self, array_id: str) -> int:
        """Tasks of the array ``array_id`` whose exit file is written (d5pipe.execute.slurm_flight)."""
        prefix = f"{array_id}_"
        return sum(1 for path in self.array_exits.get(array_id, ())
                   if (got := read_exit(Path(path))) is not None and got[0].startswith(prefix))

    def run_array_jobs(self, jobs: list[Any]) -> None:
        size = self.site_limits.array_chunk(int(self.workflow.executor_settings.array_limit), len(jobs))
        for start in range(0, len(jobs), size):
            chunk = jobs[start:start + size]
            if not self.flight.admit(len(chunk), array=True):
                return
            try:
                self._collected.ids = []
                super().run_array_jobs(chunk)  # one sbatch: --array=1-len(chunk)
                ids = self._collected.ids
                if ids:
                    array_id = ids[0].split("_", 1)[0]
                    self.array_exits[array_id] = [self.exits[j.jobid] for j in chunk if j.jobid in self.exits]
                    self.flight.submitted(array_id, len(chunk))
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

    async def _query_status(self, command: str, logger: Any) -> tuple[dict[str, str] | None, float | None]:
        """The plugin's status query, its answer kept for the driver's feed."""
        states, took = await _plugin_query(command, logger)
        if states is not None:
            self.feed.answered, self.feed.states = time.time(), dict(states)
        return states, took

    def _ended(self, job_info: Any) -> int | None:
        """The exit code the job's own SLURM attempt wrote (d5pipe.execute.slurm_status); None while
        it runs or when the file is another attempt's."""
        path = self.exits.get(getattr(job_info.job, "jobid", None))  # type: ignore[arg-type]
        got = read_exit(Path(path)) if path is not None else None
        return got[1] if got is not None and got[0] == str(job_info.external_jobid) else None

    async def check_active_jobs(self, active_jobs: list[Any]) -> Any:
        """One round (every :data:`~d5pipe.execute.slurm_status.LOCAL_S`): a job whose exit file says
        0 succeeded, with no scheduler call; the plugin's status query only when the schedule says
        so, or at once when an exit file says a job failed (SLURM's word decides: a requeued task).
        An outage of the query and its end go to the run's SLURM event log, and a round whose
        query failed keeps every job active (the plugin's own yields none of them: on 128 nodes with
        slurmdbd stopped for two minutes the run then waited forever). The round's view goes to
        the driver (d5pipe.execute.slurm_status.Feed)."""
        if not self.ready:  # nothing is submitted before __post_init__ ends
            for job in active_jobs:
                yield job
            return
        rest = []
        for job in active_jobs:
            code = self._ended(job)
            if code == 0:
                self.report_job_success(job)
                log = job.aux.get("slurm_logfile") if isinstance(getattr(job, "aux", None), dict) else None
                if log is not None and not self.workflow.executor_settings.keep_successful_logs:
                    Path(log).unlink(missing_ok=True)  # as the plugin does for a success it saw in sacct
                continue
            if code is not None and (failed := (self.exits[job.job.jobid], str(code))) not in self.failed_exits:
                self.failed_exits.add(failed)
                self.schedule.hurry()
            rest.append(job)
        now = time.monotonic()
        if rest and self.schedule.due(now):
            self.schedule.asked(now)
            rest = [job async for job in self._plugin_round(rest)]
        for job in rest:
            yield job
        self._publish([str(j.external_jobid) for j in rest])

    def _publish(self, waiting: list[str]) -> None:
        """The feed, when it changed or every :data:`FEED_EVERY_S` (the driver takes an old one for a hung executor)."""
        now = time.time()
        if (waiting, self.feed.answered) == (self.feed.waiting, self._fed_answer) and now - self.feed.written < FEED_EVERY_S:
            return
        self.feed.written, self.feed.waiting, self._fed_answer = now, waiting, self.feed.answered
        if set(waiting) - set(self.feed.since):  # new submissions: confirm them once
            self.schedule.by(time.monotonic() + GRACE_S + LOCAL_S)
        self.feed.since = {i: self.feed.since.get(i, now) for i in waiting}
        try:
            self.feed.write(self.feed_path)
        except OSError as exc:  # the driver then asks SLURM itself
            self.logger.warning(f"d5pipe: could not write {self.feed_path}: {exc}")

    async def _plugin_round(self, active_jobs: list[Any]) -> Any:
        def counts() -> tuple[int, int]:  # set by the plugin's __post_init__, which `ready` waits for
            return self._status_query_calls, self._status_query_failures

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
        """A pause of :data:`~d5pipe.execute.slurm_status.LOCAL_S` between rounds, ended early once
        Snakemake shuts the executor down: the run ends when its last job does."""
        end = time.monotonic() + LOCAL_S
        while self.wait and time.monotonic() < end:
            await asyncio.sleep(min(0.5, max(0.0, end - time.monotonic())))

    def cancel(self) -> None:
        self.flight.stopped.set()
        super().cancel()

    def shutdown(self) -> None:
        self.flight.stopped.set()
        super().shutdown()
