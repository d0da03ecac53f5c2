"""The Snakemake of one SLURM job of a d5pipe run: ``python -m d5pipe.execute.snakemake_job ARGS``.

d5pipe's executor (d5pipe.execute.slurm_executor) and its job-step executor
(d5pipe.execute.slurm_jobstep) run each job's Snakemake this way instead of ``python -m
snakemake``. It is Snakemake's command line with d5pipe's job-step executor alone: the SLURM
plugin, which a plain Snakemake imports in every process, asks slurmctld for its configuration
while it is imported, and a job runs two Snakemake processes (the batch step's and the one it
starts with ``srun -n1``): thousands of array tasks would send thousands of ``scontrol show
config`` to one controller.
"""

from __future__ import annotations

import sys

JOB_PLUGINS = ("snakemake_executor_plugin_slurm_jobstep",)
MODULE = "-m d5pipe.execute.snakemake_job"


def job_command(text: str) -> str:
    """A Snakemake job command line (``... -m snakemake ...``) run by this module instead."""
    return text.replace("-m snakemake ", f"{MODULE} ", 1)


def main() -> None:
    from d5pipe.execute.snakemake_main import run_cli

    run_cli(sys.argv[1:], plugins=JOB_PLUGINS)


if __name__ == "__main__":
    main()
