# Aggregation and the report.


rule aggregate:
    input:
        all_shard_markers,
    output:
        "results.parquet",
    conda:
        "../envs/d5pipe.yaml"
    log:
        "logs/aggregate/aggregate.log",
    script:
        "../scripts/aggregate.py"


rule report:
    input:
        "results.parquet",
    output:
        html="report.html",
        md="report.md",
    conda:
        "../envs/d5pipe.yaml"
    log:
        "logs/report/report.log",
    script:
        "../scripts/report.py"
