"""Snakemake script of the prepare_data rule: materialise one dataset."""
from d5pipe.execute.jobs import prepare_data_job

prepare_data_job(snakemake)  # noqa: F821  (injected by Snakemake)
