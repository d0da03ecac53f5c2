# One job per shard per level; a shard runs its points in one process (d5pipe.shard).
# Point records (points/<stage>/<id>.json) are written by the job as each point finishes;
# the declared output is the shard's completion marker.


rule level0:
    input:
        spec="plan/level0/{shard}.json",
    output:
        "shards/level0/{shard}.json",
    params:
        stage="level0",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "level0")
    log:
        "logs/level0/{shard}.log",
    resources:
        **d5api.stage_resources(".", "level0"),
    script:
        "../scripts/run_shard.py"


rule level1:
    input:
        spec="plan/level1/{shard}.json",
        data=level1_data,
    output:
        "shards/level1/{shard}.json",
    params:
        stage="level1",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "level1")
    log:
        "logs/level1/{shard}.log",
    resources:
        **d5api.stage_resources(".", "level1"),
    script:
        "../scripts/run_shard.py"


rule level2:
    input:
        spec="plan/level2/{shard}.json",
        data=level2_data,
    output:
        "shards/level2/{shard}.json",
    params:
        stage="level2",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "level2")
    log:
        "logs/level2/{shard}.log",
    resources:
        **d5api.stage_resources(".", "level2"),
    script:
        "../scripts/run_shard.py"


rule level3:
    input:
        spec="plan/level3/{shard}.json",
        data=level3_data,
    output:
        "shards/level3/{shard}.json",
    params:
        stage="level3",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "level3")
    log:
        "logs/level3/{shard}.log",
    resources:
        **d5api.stage_resources(".", "level3", per_shard_tasks=True),
        tasks=level3_tasks,
        mpi=level3_mpi,
    script:
        "../scripts/run_shard.py"
