"""Snakemake script of the level0..level3 rules: run one shard of points."""
from d5pipe.execute.jobs import shard_job

shard_job(snakemake)  # noqa: F821  (injected by Snakemake)
