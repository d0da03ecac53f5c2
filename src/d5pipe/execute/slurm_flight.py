"""Admission of a run's SLURM submissions: the site's ``MaxJobCount`` and ``MaxSubmitJobs``, and
one run-wide limit on tasks in flight (``executor.jobs``), judged from one ``squeue`` per
:attr:`Flight.poll_s` for the whole run, and only while a submission waits or an array's throttle
may rise. d5pipe.execute.slurm_executor's module docstring says how the executor uses it.
"""

from __future__ import annotations

import getpass
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from d5pipe.core.toolchain import run_tool
from d5pipe.execute.slurm import slurm_answer
from d5pipe.execute.slurm_limits import SiteLimits

ACTIVE = frozenset({"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED",
                    "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})
"""squeue states of a job that still counts towards ``MaxSubmitJobs`` and the run's limit."""
QUEUE_FORMAT = "%F|%K|%T|%j|%u"
POLL_S = 10.0
TRUST_FILES_S = 60.0
"""Longest a look at the queue is put off on the jobs' exit files' word (a task killed before its
script wrote one is then seen by the next look)."""


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
                 waited: Callable[[int, str, float], None] = lambda _n, _why, _s: None,
                 finished: Callable[[str], int] | None = None) -> None:
        self.limits, self.limit, self.name = limits, max(1, int(limit)), name
        self.finished = finished
        """Array ID -> its tasks whose exit file is written (what the file system says without
        slurmctld); None: no such word, every judgement comes from the queue."""
        self._finished_seen = -1
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
                finished = self._finished_total()
                text = self.query()
                self._at = time.monotonic()
                if text is not None:
                    self.view = parse_queue(text, self.name, self.user)
                    self._finished_seen = finished
            return self.view

    def _finished_total(self) -> int:
        return sum(self.finished(a) for a in self.sizes) if self.finished is not None else -1

    def _files_trusted(self) -> bool:
        return self.finished is not None and time.monotonic() - self._at < TRUST_FILES_S

    def surely_filling(self) -> bool:
        """Whether the filling array last seen surely has tasks not started yet, by the exit files
        alone: its tasks, less its throttle (the most that can run), less those ended, are more
        than none. A new array then waits without a look at the queue."""
        filling = self.view.filling
        if filling is None or filling not in self.sizes or self.finished is None or not self._files_trusted():
            return False
        return self.sizes[filling] - self.throttle.get(filling, self.limit) - self.finished(filling) > 0

    def quiet(self) -> bool:
        """Whether no task of the run's arrays has ended since the last look at the queue: then
        no slot was freed and no throttle may rise."""
        return self._files_trusted() and self._finished_total() == self._finished_seen

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

    def try_admit(self, tasks: int, array: bool) -> bool:
        """:meth:`admit_now`, unless the exit files alone say that a new array must wait
        (:meth:`surely_filling`): then False with no look at the queue."""
        if array and self.surely_filling():
            self.why = f"array {self.view.filling} still has task(s) waiting to start"
            return False
        return self.admit_now(tasks, array)

    def admit(self, tasks: int, array: bool) -> bool:
        """Wait until ``tasks`` may be submitted (:meth:`admit_now`); False once stopped. A wait
        is told to ``waited`` (tasks, the first reason, seconds) once it ends."""
        t0, first = time.monotonic(), ""
        while not self.try_admit(tasks, array):
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
            if self.quiet():
                return
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
    run_tool(["scontrol", "update", *args], 20.0)


def squeue_all() -> str | None:
    """Every job and array task slurmctld holds (:data:`QUEUE_FORMAT`); None when squeue does not answer."""
    proc = slurm_answer(["squeue", "-h", "-r", "-t", "all", "-o", QUEUE_FORMAT], 30.0)
    return proc.stdout if proc is not None and proc.returncode == 0 else None
