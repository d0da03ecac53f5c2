"""``python -m d5pipe.execute.reaper RUN_DIR SINCE SNAKEMAKE_PID``: cancel a SLURM run whose driver died.

Started by the driver (d5pipe.execute.snakemake_run) in its own session with a pipe on stdin. When the
driver finishes it writes ``done`` and closes the pipe; the reaper exits. When the driver dies
any other way (SIGKILL included) the pipe closes without ``done``: the reaper kills Snakemake's
session and ``scancel``s the run's SLURM jobs submitted since ``SINCE``, then exits.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir, since, snakemake_pid = args[0], datetime.fromisoformat(args[1]), int(args[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal is the driver's to handle
    message = sys.stdin.buffer.read()
    if message.strip() == b"done":
        return 0
    try:
        os.killpg(snakemake_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    from d5pipe.core.errors import D5PipeError
    from d5pipe.execute.slurm import cancel_run_jobs

    try:
        cancel_run_jobs(run_dir, since=since)
    except D5PipeError:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
