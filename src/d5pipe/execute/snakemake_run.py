"""Run Snakemake for ``d5pipe run``: a quiet console, and nothing left behind.

Console: Snakemake's own output goes to ``RUN/logs/snakemake.log``; the console gets one line per
finished job with the jobs and points done and an ETA (``verbose`` passes Snakemake's output
through as well). Job failures are named with their log file and d5pipe's own next step.

Cleanup, whatever ends the driver:

* Snakemake runs in its own session and receives SIGKILL from the kernel when the driver dies
  (``PR_SET_PDEATHSIG``); every job body stops when its parent Snakemake is gone
  (d5pipe.execute.jobs), and a shard's worker dies with its shard.
* SIGINT / SIGTERM / ``timeout``: Snakemake's session is killed at once (a SIGTERMed Snakemake
  would wait for its jobs) and, under SLURM, the run's jobs are cancelled.
* Under SLURM a small reaper process (d5pipe.execute.reaper) holds a pipe from the driver: if the
  driver dies without saying "done" (e.g. SIGKILL) the reaper cancels the run's jobs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import kill_group
from d5pipe.measure.process import die_with_parent
from d5pipe.rundir.layout import RunDir

if TYPE_CHECKING:
    from d5pipe.execute.slurm_watch import SlurmWatch
    from d5pipe.execute.slurm_watchdog import Watchdog

STEPS = re.compile(r"(\d+) of (\d+) steps \((\d+)%\) done")
FINISHED = re.compile(r"Finished jobid: \d+ \(Rule: ([\w-]+)\)")
ERROR_IN_RULE = re.compile(r"Error in rule ([\w-]+):")
LOG_LINE = re.compile(r"^\s+log: (\S+)")


class Interrupted(D5PipeError):
    """The run was stopped by a signal or its ``--timeout``; exit 130 (SIGINT), 143 or 124."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Console:
    """Turns Snakemake's output into one line per finished job (see module docstring)."""

    def __init__(self, rd: RunDir, verbose: bool, out: IO[str]) -> None:
        self.rd = rd
        self.verbose = verbose
        self.out = out
        self.t0 = time.perf_counter()
        self.planned = {stage: set(ids) for stage, ids in rd.planned_ids.items()}
        self.total_points = sum(len(ids) for ids in self.planned.values())
        self.failed_jobs: list[tuple[str, str]] = []
        self._rule = ""
        self._error_rule: str | None = None
        self.disk_full: str | None = None
        """Set when a job ran out of space (its DiskFull line, else the run directory's)."""

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def _points_done(self) -> int:
        return sum(len(ids & self.rd.existing_records(stage)) for stage, ids in self.planned.items())

    def feed(self, line: str) -> None:
        if self.verbose:
            self.out.write(line)
            self.out.flush()
        self._note_disk_full(line)
        m = FINISHED.search(line)
        if m:
            self._rule = m.group(1)
            return
        m = ERROR_IN_RULE.search(line)
        if m:
            self._error_rule = m.group(1)
            return
        m = LOG_LINE.match(line)
        if m and self._error_rule is not None:
            self.failed_jobs.append((self._error_rule, m.group(1)))
            if not self.verbose:
                self.say(f"d5pipe: job {self._error_rule} failed; log: {self.rd.root / m.group(1)}")
            self._error_rule = None
            return
        m = STEPS.search(line)
        if m and not self.verbose and self._rule != "all":
            done, total = int(m.group(1)), int(m.group(2))
            elapsed = time.perf_counter() - self.t0
            eta = f", ~{elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
            self.say(f"d5pipe: [{done}/{total} jobs] {self._rule or 'job'} done · "
                     f"{self._points_done()}/{self.total_points} points · {elapsed:.0f} s{eta}")


    def _note_disk_full(self, line: str) -> None:
        """A job's DiskFull line (the report rule runs in Snakemake's process and Snakemake prints
        its error), or a shard job's exit 75, or Snakemake's own write finding no space (its
        metadata and markers under ``.snakemake``): the path it names, else the run directory."""
        from d5pipe.core.errors import DISK_FULL_EXIT, DiskFull

        if DISK_FULL_MARK in line:
            self.disk_full = "no space left to write" + line.split(DISK_FULL_MARK, 1)[1].rstrip()
        elif self.disk_full is None and (f"exit status {DISK_FULL_EXIT}." in line or NO_SPACE.search(line)):
            named = NO_SPACE_AT.search(line)
            where = (named.group(1) or named.group(2)) if named else None
            self.disk_full = str(DiskFull.at(self.rd.root / where if where else self.rd.root))


DISK_FULL_MARK = "no space left to write"
"""How d5pipe.core.errors.DiskFull's message begins."""
NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded")
"""strerror of ENOSPC and EDQUOT, in a traceback or in Snakemake's own error line."""
NO_SPACE_AT = re.compile(rf"\[Errno \d+\] (?:{NO_SPACE.pattern}): '([^']+)'"
                         rf"|\[Errno \d+\] (?:{NO_SPACE.pattern})\)\. Please ensure write permissions for the directory (\S+)")
"""The path such a line names: an OSError's filename, or the directory of Snakemake's metadata
("Error recording metadata for finished job ([Errno 28] No space left on device). Please ensure
write permissions for the directory RUN/.snakemake")."""


def _cancel_slurm(rd: RunDir, since: datetime) -> list[str]:
    from d5pipe.execute.slurm import cancel_run_jobs

    try:
        return cancel_run_jobs(rd.root, since=since)
    except D5PipeError as exc:
        print(f"d5pipe: could not cancel the run's SLURM jobs ({exc})", file=sys.stderr, flush=True)
        return []


def _start_reaper(rd: RunDir, since: datetime, snakemake_pid: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "d5pipe.execute.reaper", str(rd.root.resolve()),
         since.isoformat(), str(snakemake_pid)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)


def snakemake_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if "SLURM_CONF" in env:  # the SLURM plugin deletes SLURM_* inside its job steps
        env["D5PIPE_SLURM_CONF"] = env["SLURM_CONF"]
    return env


def start_snakemake() -> subprocess.Popen[str]:
    """A Snakemake process that imports Snakemake now and runs once it is given its arguments
    (d5pipe.execute.snakemake_main); ``run_workflow`` gives them, ``discard`` ends it unused."""
    return subprocess.Popen([sys.executable, "-m", "d5pipe.execute.snakemake_main"], env=snakemake_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True, preexec_fn=die_with_parent)


def discard(proc: subprocess.Popen[str] | None) -> None:
    """End a Snakemake process from ``start_snakemake`` that was never given its arguments."""
    if proc is not None and proc.poll() is None:
        kill_group(proc)


def _give_args(proc: subprocess.Popen[str], cmd: list[str]) -> None:
    if cmd[1:3] != ["-m", "snakemake"]:
        raise ValueError(f"not a snakemake command line: {cmd[:3]}")
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(cmd[3:]) + "\n")
    proc.stdin.close()


def run_workflow(cmd: list[str], rd: RunDir, slurm: bool, timeout: float | None = None,
                 verbose: bool = False,
                 started: subprocess.Popen[str] | None = None,
                 watchdog_s: float = 300.0) -> tuple[int, Console]:
    """Run Snakemake to completion (see module docstring); returns its exit code and the console.

    ``cmd`` is ``build_command``'s list; ``started`` a process from ``start_snakemake`` (one is
    started here otherwise), which is given ``cmd``'s arguments. Under SLURM a run whose pending
    shards SLURM does not hold stops after ``watchdog_s`` without progress
    (d5pipe.execute.slurm_watchdog), exit 75.
    """
    from d5pipe.execute.slurm import SlurmJob, run_jobs
    from d5pipe.execute.slurm_status import Feed
    from d5pipe.execute.slurm_watch import SlurmWatch
    from d5pipe.execute.slurm_watchdog import Watchdog

    log_path = snakemake_log(rd)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    since = datetime.now()
    console = Console(rd, verbose, sys.stdout)
    proc = started if started is not None and started.poll() is None else start_snakemake()
    env = snakemake_env()
    began = time.time()

    def view() -> Feed | None:  # the executor's view of the run's jobs: no scheduler call while it is fresh
        return Feed.read_usable(rd.slurm_status_file, began)

    def jobs() -> list[SlurmJob]:
        seen = view()
        if seen is None:
            return run_jobs(rd.root, since=since, env=env)
        return [SlurmJob(job_id, state, "", "", "", "", "", "") for job_id, state in seen.jobs()]

    watch = SlurmWatch(env, poll_s=60.0, view=view) if slurm else None
    # one look every tenth of the stall limit (30 s by default); SLURM is asked only when the view is stale
    dog = Watchdog(rd, jobs, stall_s=watchdog_s,
                   poll_s=max(1.0, min(30.0, watchdog_s / 10)),
                   waiting_for=lambda: list(watch.jobs.copy().values()) if watch else []) if slurm else None
    _give_args(proc, cmd)
    reaper = _start_reaper(rd, since, proc.pid) if slurm else None
    stop: list[int] = []
    previous = _catch_stop_signals(stop)

    def pump() -> None:
        assert proc.stdout is not None
        log_ok = True
        with open(log_path, "a", encoding="utf-8", buffering=1) as log:  # a killed run keeps its log
            for line in proc.stdout:
                if log_ok:
                    try:
                        log.write(line)
                    except OSError:  # a full disk: the console still gets every line
                        log_ok = False
                console.feed(line)
                if watch is not None:
                    watch.feed(line)

    reader = threading.Thread(target=pump, name="d5pipe-snakemake-output", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout if timeout else None
    reason: Interrupted | None = None
    try:
        while proc.poll() is None:
            if stop:
                name = signal.Signals(stop[0]).name
                reason = Interrupted(f"stopped by {name}", 128 + stop[0])
                break
            if deadline is not None and time.monotonic() > deadline:
                reason = Interrupted(f"snakemake did not finish within {timeout:g} s (--timeout; killed)", 124)
                break
            if watch is not None:
                reason = _watch_slurm(watch, dog, console)
                if reason is not None:
                    break
            try:
                proc.wait(0.2)
            except subprocess.TimeoutExpired:
                pass
        if reason is not None:
            kill_group(proc)
            if slurm:
                cancelled = _cancel_slurm(rd, since)
                reason = Interrupted(f"{reason}; cancelled SLURM jobs: {', '.join(cancelled) or 'none'}",
                                     reason.exit_code)
        rc = proc.wait()
        reader.join(10)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if reaper is not None:
            _end_reaper(reaper)
    if reason is not None:
        raise reason
    if rc != 0 and slurm:
        _report_slurm_failures(rd, since)
    return rc, console


def _catch_stop_signals(stop: list[int]) -> dict[int, Any]:
    """SIGINT and SIGTERM append to ``stop`` (the main thread only); returns the previous handlers."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, _frame: stop.append(signum))
    return previous


def _watch_slurm(watch: SlurmWatch, dog: Watchdog | None, console: Console) -> Interrupted | None:
    """One look at the run's SLURM jobs: check that SLURM still holds the pending shards (the
    watchdog's notice goes to the console); why to stop, if it must. (Arrays are throttled by
    d5pipe's executor in Snakemake's process: d5pipe.execute.slurm_executor.)"""
    from d5pipe.execute.slurm_watch import StatusLost
    from d5pipe.execute.slurm_watchdog import STALLED_EXIT, Stalled

    try:
        watch.check()
        notice = dog.check() if dog is not None else None
    except (StatusLost, Stalled) as exc:
        return Interrupted(str(exc), STALLED_EXIT)
    if notice:
        console.say(notice)
    return None


def _end_reaper(reaper: subprocess.Popen[bytes]) -> None:
    """Tell the reaper the run ended normally, and wait for it."""
    if reaper.stdin is not None:
        try:
            reaper.stdin.write(b"done\n")
            reaper.stdin.close()
        except BrokenPipeError:
            pass
        reaper.wait(30)


def _report_slurm_failures(rd: RunDir, since: datetime) -> None:
    """After a failed SLURM run: print each shard job that did not complete, and why."""
    from d5pipe.execute.slurm import describe_job, latest_run_jobs

    try:
        jobs = latest_run_jobs(rd.root, since)
    except D5PipeError as exc:
        print(f"d5pipe: cannot list the run's SLURM jobs ({exc})", file=sys.stderr, flush=True)
        return
    for job in jobs:
        if job.state != "COMPLETED":
            print(f"d5pipe: {describe_job(job)}", file=sys.stderr, flush=True)


def snakemake_log(rd: RunDir) -> Path:
    return rd.root / "logs" / "snakemake.log"


