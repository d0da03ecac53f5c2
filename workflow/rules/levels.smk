# One rule per planned stage, generated from d5pipe's stage registry (d5pipe.levels.registry):
# a job runs one shard of that stage's points in one process (d5pipe.execute.jobs -> .shard). Point
# records (points/<stage>/<id>.json) are written by the job as each point finishes; the declared
# output is the shard's completion marker.

for _stage in d5api.enabled_stages("."):

    rule:
        name:
            _stage
        input:
            spec=f"plan/{_stage}/{{shard}}.json",
            data=d5api.shard_data_input(".", _stage),
            builds=d5api.shard_build_input(".", _stage),
        output:
            f"shards/{_stage}/{{shard}}.json",
        params:
            stage=_stage,
        conda:
            "../envs/d5pipe.yaml"
        threads: d5api.stage_threads(".", _stage)
        priority: d5api.shard_priority
        log:
            f"logs/{_stage}/{{shard}}.log",
        resources:
            **d5api.stage_resources(".", _stage),
        shell:
            d5api.shard_shell(".")
