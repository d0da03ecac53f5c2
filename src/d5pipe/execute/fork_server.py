"""A local run's fork server: shard jobs (so each repetition) stay separate processes without each
paying for the interpreter's start and torch's import.

``d5pipe run`` with the local executor and ``executor.fork_server: true`` (off by default until forked
repetitions are shown to spread no less than fresh ones, docs/performance.md) starts one server per run
(:func:`start` once the config is composed, so that it imports torch while the run is prepared;
:func:`serving` around Snakemake names the run). Once named, the server moves into the run
directory and binds the Unix socket ``RUN/shards/fork.sock`` at once (a job that connects early
waits in the backlog); it imports torch, numpy and the code of the run's stages -- imports only:
no torch operation, so no thread pool, no allocator or kernel cache is warmed that a child could
inherit -- and takes the environment record's subprocess readings once (the MPI library, started
before the imports; the git state of the code it imported). For every job
(d5pipe.execute.fork_client) it forks a child that takes the job's standard streams, cwd and
environment, re-seeds Python's and numpy's global generators, sets torch's threads from the
job's ``OMP_NUM_THREADS`` (torch read the server's at import), gives itself a heap layout of its
own (:func:`vary_heap`: unvaried, every child would put its tensors at the same addresses), and
runs ``d5pipe.execute.jobs.shard_main``; the child's exit code goes back to the client.

What a fork cannot give each child: its own hash randomisation (``PYTHONHASHSEED`` is fixed when
the server's interpreter starts) and its own address-space layout of the libraries and of what
the imports allocated (randomised at ``exec``). benchmarks/bench_repetition_start.py measures the
between-repetition spread with and without the server, whole run against whole run;
benchmarks/bench_fork_spread.py compares a toy server's forks and fresh processes within one time
window, benchmarks/bench_fork_shards.py this server's forks and d5pipe's fresh shard jobs.

Lifetime: the server dies with the driver (``PR_SET_PDEATHSIG``) and is ended by it when the run
ends (normally, by an error or by Ctrl-C); a child dies with the server (``PR_SET_PDEATHSIG``)
and with its client (it kills itself when the client's connection closes).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from d5pipe.execute.fork_client import MAX_MESSAGE, START_ENV
from d5pipe.measure.process import die_with_parent, exit_now, forget_exit_handlers

WAKE = "wake"
_STARTED_IN = os.getcwd()
"""The server's cwd at its start: ``sys.path[0]`` of a ``python -m``."""
SOCKET = "shards/fork.sock"
"""The server's socket, relative to the run directory (the jobs' cwd: no path-length limit)."""


def _preload_base() -> None:
    """Import what every shard job imports, and run nothing."""
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import d5pipe.execute.jobs  # noqa: F401
    import d5pipe.execute.shard  # noqa: F401
    import d5pipe.provenance.environment  # noqa: F401


def _preload(stages: list[str]) -> None:
    """Import the code of the run's stages, and run nothing; then take the readings of the
    environment record that children would each take with a subprocess (the MPI library, git)."""
    from d5pipe.levels.registry import STAGES
    from d5pipe.provenance.environment import ready_for_forks

    for stage in stages:
        if stage in STAGES:
            STAGES[stage].runner()
    ready_for_forks()


def _watch_client(conn: socket.socket) -> None:
    """In the child: once the client's connection closes (the client is gone), die."""
    def watch() -> None:
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="d5pipe-fork-client-watch", daemon=True).start()


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int], server_pid: int) -> None:
    """In the forked child: become the job, run the shard, exit with its code (never returns)."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
        die_with_parent()
        forget_exit_handlers()  # the server's; a child runs those registered in it (exit_now)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        _import_path(os.environ.get("PYTHONPATH", ""), request["env"].get("PYTHONPATH", ""))
        os.environ.clear()
        os.environ.update(request["env"])
        _reseed()
        heap = vary_heap()
        os.environ[START_ENV] = json.dumps({"how": "fork", "server_pid": server_pid, "heap": heap, "t0": request["t0"]})
        _watch_client(conn)
        from d5pipe.execute.jobs import shard_main

        argv = [str(a) for a in request["argv"]]
        sys.argv = [sys.argv[0], *argv]
        code = shard_main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the job's log (its stderr) gets the traceback
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)


def _import_path(server: str, job: str) -> None:
    """The job's cwd and ``PYTHONPATH`` in place of the server's on ``sys.path`` (a fresh ``python
    -m`` would have read the job's)."""
    if sys.path and sys.path[0] == _STARTED_IN:
        sys.path[0] = os.getcwd()
    if server == job:
        return
    for entry in filter(None, server.split(os.pathsep)):
        if entry in sys.path:
            sys.path.remove(entry)
    sys.path[1:1] = [os.path.abspath(e) for e in job.split(os.pathsep) if e]


def _reseed() -> None:
    """What differs per fresh process and must per child: the global generators' states, and
    torch's threads (from this job's environment, as a fresh import would read them)."""
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


_KEPT: list[bytearray] = []
"""The blocks :func:`vary_heap` keeps, for the child's life."""


def vary_heap(rng: random.Random | None = None) -> dict[str, int]:
    """Give this child a heap layout of its own, as a fresh process has (recorded as ``heap``).

    Forks of one server inherit one heap, so without this every child allocates its tensors at the
    same addresses and offsets within a page (a fresh process's import sequence, hash seed and
    environment move them), and the children's spread leaves out the layout's share of
    process-to-process variation (Mytkowicz et al., ASPLOS 2009; Curtsinger & Berger's Stabilizer,
    ASPLOS 2013, randomise layout to sample it). Here a random number (64-256) of blocks of random
    size (16 B - 32 KiB in 16-byte steps, below malloc's mmap threshold, so from the heap that small
    tensors come from) are allocated, taking up the server's free chunks, and about half freed
    again: later allocations land in the freed holes or past the kept blocks (about 1.3 MiB). Forty
    such children put the three tensors of a 64x64 matmul at 40 different triples of offsets within
    a page, the first tensor at 25-28 offsets; 20 fresh processes, at 17 triples, the first at 10;
    unvaried children, all at one. Measured against fresh processes in one time window:
    benchmarks/bench_fork_shards.py."""
    rng = rng or random.Random(os.urandom(16))
    blocks = [bytearray(rng.randrange(16, 1 << 15, 16)) for _ in range(rng.randint(64, 256))]
    kept = [b for b in blocks if rng.random() < 0.5]
    _KEPT.extend(kept)
    n = len(blocks)
    del blocks  # the others are freed here
    return {"blocks": n, "kept": len(kept), "kept_bytes": sum(map(len, kept))}


def _listen(sock_path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    listener.listen(64)
    return listener


def serve(listener: socket.socket, sock_path: str, stages: list[str], stop: list[int]) -> None:
    """Import the stages' code, then fork a child per request until SIGTERM (never returns)."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    wake_r, wake_w = os.pipe()  # SIGTERM wakes the select at once (the driver waits for the server)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    sel.register(wake_r, selectors.EVENT_READ, WAKE)
    live: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    server_pid = os.getpid()
    try:  # a failed import ends the server: the waiting jobs run fresh
        _preload(stages)
        while not stop:
            for key, _ in sel.select(timeout=5.0):
                if key.data is None:
                    _accept(listener, sel, live, server_pid)
                elif key.data == WAKE:
                    os.read(wake_r, 512)
                else:
                    _reap(int(key.fd), sel, live)
    finally:
        for pidfd, (pid, conn) in list(live.items()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            conn.close()
            os.close(pidfd)
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock_path)
    os._exit(0)


def _accept(listener: socket.socket, sel: selectors.BaseSelector,
            live: dict[int, tuple[int, socket.socket]], server_pid: int) -> None:
    conn, _ = listener.accept()
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 3)
        request = json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        listener.close()
        for other_pidfd, (_pid, other) in live.items():
            other.close()
            os.close(other_pidfd)
        _child(conn, request, fds, server_pid)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    live[pidfd] = (pid, conn)
    sel.register(pidfd, selectors.EVENT_READ, pid)
    with contextlib.suppress(OSError):
        conn.send(json.dumps({"pid": pid}).encode())


def _reap(pidfd: int, sel: selectors.BaseSelector, live: dict[int, tuple[int, socket.socket]]) -> None:
    pid, conn = live.pop(pidfd)
    sel.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        conn.send(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode())
    conn.close()


def start() -> subprocess.Popen[bytes]:
    """A fork server that imports torch now and serves once :func:`serving` names its run (so the
    imports run on another core while the driver plans); :func:`discard` ends it unused."""
    return subprocess.Popen([sys.executable, "-m", "d5pipe.execute.fork_server"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=die_with_parent)


def discard(proc: subprocess.Popen[bytes] | None) -> None:
    """End a server from :func:`start` (unused or done; nothing if it has ended)."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def serving(run_dir: Path, stages: list[str], started: subprocess.Popen[bytes] | None = None,
            wait_s: float = 5.0) -> Iterator[subprocess.Popen[bytes]]:
    """A fork server (``started`` by :func:`start`, or a new one) for the run in ``run_dir`` while
    the block runs; ended however the block ends. Waits up to ``wait_s`` for its socket, so that
    the first jobs find it (it binds before its imports are done: early jobs wait in its backlog)."""
    sock = Path(run_dir) / SOCKET
    sock.parent.mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "logs").mkdir(parents=True, exist_ok=True)
    proc = started if started is not None and started.poll() is None else start()
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps({"run_dir": str(Path(run_dir).resolve()), "stages": stages}).encode() + b"\n")
        proc.stdin.close()
    except OSError:  # it died: the jobs run fresh
        pass
    deadline = time.monotonic() + wait_s
    while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End the server (SIGTERM; SIGKILL after 5 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    """``python -m d5pipe.execute.fork_server`` (:func:`start`): import torch while a thread waits
    for the run (one JSON line on stdin: ``run_dir``, ``stages``) and binds the socket at once."""
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _f: stop.append(sig))
    given: dict[str, Any] = {}

    def receive() -> None:
        line = sys.stdin.buffer.readline()
        if not line:
            return  # discarded
        run = json.loads(line)
        os.chdir(run["run_dir"])
        log = os.open("logs/fork_server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        given.update(stages=list(run["stages"]), listener=_listen(SOCKET))

    reader = threading.Thread(target=receive, name="d5pipe-fork-server-run", daemon=True)
    reader.start()
    from d5pipe.provenance.environment import start_probe

    start_probe()  # the MPI probe, a subprocess, runs while torch is imported
    _preload_base()
    reader.join()  # no thread left when the server forks
    if "listener" not in given:
        return 0
    serve(given["listener"], SOCKET, given["stages"], stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
