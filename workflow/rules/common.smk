# Helpers: one-line calls into d5pipe.workflow_api (typed and unit-tested there).
import d5pipe.workflow_api as d5api
from snakemake.utils import validate

validate(d5api.load_index("."), "../schemas/plan_index.schema.yaml")

STAGES = d5api.enabled_stages(".")


def final_outputs():
    return d5api.final_outputs(".")


def all_shard_markers(wildcards):
    return d5api.shard_markers(".")




def level1_data(wildcards):
    return d5api.shard_datasets(".", "level1", wildcards.shard)


def level2_data(wildcards):
    return d5api.shard_datasets(".", "level2", wildcards.shard)


def level3_data(wildcards):
    return d5api.shard_datasets(".", "level3", wildcards.shard)


def level3_tasks(wildcards):
    return d5api.shard_tasks(".", "level3", wildcards.shard)


def level3_mpi(wildcards):
    return d5api.shard_mpi(".", "level3", wildcards.shard)
