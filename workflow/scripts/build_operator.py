"""Snakemake script of the build_operator rule: build one compiled operator (or reuse its binary)."""
from d5pipe.execute.jobs import build_operator_job

build_operator_job(snakemake)  # noqa: F821  (injected by Snakemake)
