"""What a SLURM job of a d5pipe run runs: a script of its own, ``.snakemake/d5j/<hash>``.

d5pipe's executor (d5pipe.execute.slurm_executor) gives the plugin ``sh <script>`` as each job's
command, so an array call carries a short line per task (d5pipe.execute.slurm_limits.TASKS_PER_CALL),
and a shell rule's job runs the rule's command itself, without a Snakemake in the job
(:func:`direct_body`); other jobs run their Snakemake command (:func:`snakemake_body`). Either
script writes ``<script>.rc`` when its command ends (:data:`EXIT_FILE`, read by
d5pipe.execute.slurm_status), which :func:`job_script` removes before the job is submitted.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from d5pipe.execute.slurm_limits import JOB_SCRIPTS, script_call
from d5pipe.execute.slurm_task import EXECS

EXIT_FILE = (
    'id=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}\n'
    'printf \'%s %s\\n\' "${id:-${SLURM_JOB_ID:-local}}" "$rc" > "$0.rc.$$" && mv -f "$0.rc.$$" "$0.rc"\n'
    'exit "$rc"\n')
"""The end of every job script, after ``rc=$?``: ``<script>.rc`` says the job's SLURM ID and its command's exit
code (written to a temporary name, then renamed: a reader sees all of it or nothing)."""


def exit_file(call: str) -> Path:
    """The exit file of the job whose command is ``call`` (``sh <script>``, :func:`job_script`)."""
    return Path(call.split(maxsplit=1)[1] + ".rc")


def job_script(body: str, where: Path = JOB_SCRIPTS) -> str:
    """``sh <script>``: ``body`` written once to a script named by its hash; an exit file of an
    earlier run of the same command is removed (the job is about to be submitted)."""
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    path = where / digest
    if not path.exists():
        from d5pipe.core.atomic import write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, body, durable=False)
    call = script_call(digest, where)
    exit_file(call).unlink(missing_ok=True)
    return call


def snakemake_body(command: str) -> str:
    """A script that runs a job's Snakemake command with the arguments it is given (the plugin
    appends the array's task commands to the first task's; such a call leaves no exit file, its
    tasks' own scripts write theirs)."""
    return f'{command} "$@"\nrc=$?\ncase "$1" in {EXECS}*) exit "$rc";; esac\n' + EXIT_FILE


def direct_body(shell: str, dirs: list[str], python: str = sys.executable) -> str:
    """A script that runs a shell rule's command itself: given the array's task commands, it
    hands them to d5pipe.execute.slurm_task (which runs this task's); else it makes the rule's
    output and log folders and runs the command under bash, as Snakemake would."""
    made = f"mkdir -p {' '.join(shlex.quote(d) for d in dirs)}\n" if dirs else ""
    return (f'case "$1" in {EXECS}*) exec {shlex.quote(python)} -m d5pipe.execute.slurm_task "$0" "$1";; esac\n'
            f"{made}bash -c {shlex.quote('set -euo pipefail; ' + shell)}\nrc=$?\n" + EXIT_FILE)


def rule_shell(job: Any) -> tuple[str, list[str]] | None:
    """A single shell rule's command and its output and log folders; None for anything else
    (a script rule, a group job), which runs in a Snakemake of its own."""
    is_group = getattr(job, "is_group", None)
    if (is_group is not None and is_group()) or not getattr(job, "is_shell", False):
        return None
    shell = job.shellcmd
    if not shell:
        return None
    dirs = sorted({os.path.dirname(str(f)) for f in [*job.output, *job.log]} - {""})
    return str(shell), dirs
