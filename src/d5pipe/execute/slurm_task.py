"""The start of one SLURM array task of a d5pipe run: ``python -m d5pipe.execute.slurm_task SCRIPT [EXECS]``.

snakemake-executor-plugin-slurm submits an array as one ``sbatch`` whose command is the *first*
task's command followed by ``--slurm-jobstep-array-execs=<payload>``: base64 of a JSON map from
each other task's index to its command, zlib-compressed and hex-encoded. Every task runs that
same command; normally a Snakemake in the job reads the payload and starts a second Snakemake,
which starts a third under ``srun`` to run the rule's shell command. d5pipe's executor
(d5pipe.execute.slurm_executor) writes each shell rule's job as a script that runs the rule's
command directly (Snakemake's driver checks the outputs and records the metadata itself); the
script hands the payload to this module, which runs the command of this task's index
(``SLURM_ARRAY_TASK_ID``), or the script itself for the first task, which the payload leaves out.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import zlib

EXECS = "--slurm-jobstep-array-execs="


def task_command(own: str, execs: str, index: str | None) -> str:
    """The shell command of array task ``index``: its entry of the ``execs`` payload, else ``own``."""
    table = json.loads(base64.b64decode(execs.removeprefix(EXECS)))
    entry = table.get(str(index)) if index is not None else None
    return zlib.decompress(bytes.fromhex(entry)).decode() if entry else own


def main(argv: list[str]) -> None:
    script, execs = argv[0], argv[1] if len(argv) > 1 else EXECS + base64.b64encode(b"{}").decode()
    command = task_command(f"sh {script}", execs, os.environ.get("SLURM_ARRAY_TASK_ID"))
    os.execv("/bin/sh", ["sh", "-c", command])


if __name__ == "__main__":
    main(sys.argv[1:])
