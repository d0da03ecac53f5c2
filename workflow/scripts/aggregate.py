"""Snakemake script of the aggregate rule: point records -> results.parquet."""
from d5pipe.workflow_jobs import aggregate_job

aggregate_job(snakemake)  # noqa: F821  (injected by Snakemake)
