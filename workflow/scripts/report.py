"""Snakemake script of the report rule: results -> report.html and report.md."""
from d5pipe.execute.jobs import report_job

report_job(snakemake)  # noqa: F821  (injected by Snakemake)
