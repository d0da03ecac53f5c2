"""Snakemake script of the report rule: results -> report.html and report.md."""
from d5pipe.workflow_jobs import report_job

report_job(snakemake)  # noqa: F821  (injected by Snakemake)
