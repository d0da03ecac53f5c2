# Compiled operators: one job per distinct build (sources, flags, compiler, torch), before the shards
# whose points need it; the binary goes to the user cache, where a later run finds it.


rule build_operator:
    output:
        "builds/{build}.json",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "build_operator")
    log:
        "logs/build_operator/{build}.log",
    resources:
        **d5api.stage_resources(".", "build_operator"),
    script:
        "../scripts/build_operator.py"
