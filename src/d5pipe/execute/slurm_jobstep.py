"""d5pipe's job-step executor: snakemake-executor-plugin-slurm-jobstep's, whose inner Snakemake
(the one it starts with ``srun -n1``) is d5pipe.execute.snakemake_job, which asks SLURM nothing.

Registered under the plugin's name ``slurm-jobstep`` in d5pipe's Snakemake processes
(d5pipe.execute.snakemake_main.OWN_EXECUTORS).
"""

from __future__ import annotations

from typing import Any

import snakemake_executor_plugin_slurm_jobstep as plugin
from snakemake_executor_plugin_slurm_jobstep import ExecutorSettings, common_settings

from d5pipe.execute.snakemake_job import job_command

__all__ = ["Executor", "ExecutorSettings", "common_settings"]


class Executor(plugin.Executor):
    """The plugin's job-step executor; its job command runs d5pipe.execute.snakemake_job."""

    def format_job_exec(self, job: Any) -> str:
        return job_command(str(super().format_job_exec(job)))
