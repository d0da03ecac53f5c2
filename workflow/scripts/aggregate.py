"""Snakemake script of the aggregate rule: point records -> results.parquet."""
from d5pipe.execute.jobs import aggregate_job

aggregate_job(snakemake)  # noqa: F821  (injected by Snakemake)
