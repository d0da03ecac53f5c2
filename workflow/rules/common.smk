# Helpers: one-line calls into d5pipe.execute.snakefile_api (typed and unit-tested there).
import d5pipe.execute.snakefile_api as d5api

d5api.validate_index(".")  # plan/index.json against workflow/schemas/, stage names from the registry


def final_outputs():
    return d5api.final_outputs(".")


def all_shard_markers(wildcards):
    return d5api.shard_markers(".")
