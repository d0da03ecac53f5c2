"""The shard job's thin client of the run's fork server (d5pipe.execute.fork_server).

``python -m d5pipe.execute.fork_client SOCKET STAGE SHARD MARKER LOG`` is the ``shell:`` of a
local run's shard rules (d5pipe.execute.snakefile_api.shard_shell): it imports neither torch nor
the levels (only the standard library), asks the fork server for a child that runs
``d5pipe.execute.jobs STAGE SHARD MARKER LOG`` with this job's cwd, environment and standard
streams, and exits with the child's exit code.

* a signal to the client (Snakemake stopping the job) is passed on to the child; a client killed
  outright (SIGKILL) closes its connection, and the child kills itself when it sees that;
* no server (none started, gone, refusing) -> the client becomes the shard job itself in a fresh
  interpreter (``exec``), and the point records say so and why (:func:`process_start`);
* the server gone while its child runs (it dies with the driver, and the child with it) -> the job
  fails (exit 1) without starting the shard again, which would count another attempt of its point.

:func:`process_start` is what each point's record keeps under ``provenance.process_start``: how
its shard process was started (``fork`` from the server, or ``fresh``), the server's PID, and
``start_s``, the seconds from the job's start to the shard having its stage's code (torch) imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from typing import Any

START_ENV = "D5PIPE_PROCESS_START"
"""How this shard process was started (JSON), set by the fork server's child or the fallback."""
MAX_MESSAGE = 1 << 20
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _fresh(job: list[str], why: str, t0: float) -> int:
    """Run the job in this process's place, in a fresh interpreter (never returns)."""
    env = dict(os.environ)
    env[START_ENV] = json.dumps({"how": "fresh", "why": why, "t0": t0})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "d5pipe.execute.jobs", *job], env)
    return 1  # not reached


def _receive(sock: socket.socket, parent: int) -> dict[str, Any] | None:
    """The server's next message; None when it closed the connection. The client ends (and with
    it, by the closed connection, its child) once its parent, Snakemake, is gone."""
    sock.settimeout(1.0)
    while True:
        try:
            data = sock.recv(MAX_MESSAGE)
        except TimeoutError:
            if os.getppid() != parent:
                os._exit(1)
            continue
        except OSError:
            return None
        return json.loads(data) if data else None


def run(sock_path: str, job: list[str]) -> int:
    """Have the fork server run ``job``; its exit code (or fall back to a fresh process)."""
    t0 = time.time()
    parent = os.getppid()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(sock_path)
        request = {"argv": job, "cwd": os.getcwd(), "env": dict(os.environ), "t0": t0}
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    except OSError as err:
        sock.close()
        return _fresh(job, f"no fork server at {sock_path} ({err.strerror or err})", t0)
    started = _receive(sock, parent)
    if started is None:
        return _fresh(job, "the fork server closed the connection before starting the job", t0)
    child = int(started["pid"])

    def forward(sig: int, _frame: Any) -> None:
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    ended = _receive(sock, parent)
    if ended is None:  # the server died, its child with it: the run is ending (no second start of the
        # job here, which would count as another attempt of its point); a re-run resumes the shard
        print("d5pipe: the fork server went away while the job ran (the run is ending)", file=sys.stderr)
        return 1
    code = int(ended["rc"])
    return 128 - code if code < 0 else code


def process_start() -> dict[str, Any]:
    """How this shard process was started, for its point records (see module docstring)."""
    raw = os.environ.get(START_ENV)
    info: dict[str, Any] = json.loads(raw) if raw else {"how": "fresh"}
    return {k: v for k, v in info.items() if k != "t0"}


def note_start() -> None:
    """Once the shard has its stage's code (torch) imported: add ``start_s`` (seconds since the job
    began: the client's start for a fork, the process's own start for a fresh process) and the
    PID to :data:`START_ENV`."""
    raw = os.environ.get(START_ENV)
    info: dict[str, Any] = json.loads(raw) if raw else {"how": "fresh"}
    t0 = info.get("t0") or _process_start_time()
    if t0 is not None:
        info["start_s"] = round(time.time() - float(t0), 4)
    info["pid"] = os.getpid()
    os.environ[START_ENV] = json.dumps(info)


def _process_start_time() -> float | None:
    """This process's start (wall clock, 10 ms resolution) from /proc; None elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 5:
        print(f"usage: python -m d5pipe.execute.fork_client SOCKET STAGE SHARD MARKER LOG (got {args!r})",
              file=sys.stderr)
        return 2
    return run(args[0], args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
