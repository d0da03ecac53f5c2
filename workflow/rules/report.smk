# Aggregation and the report.


rule aggregate:
    input:
        all_shard_markers,
        "plan/checks.json",  # verdicts follow the current recipe without re-measuring
    output:
        report("results.parquet", caption="../report/results.rst", category="Results"),
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
        html=report("report.html", caption="../report/report_html.rst", category="Report"),
        md=report("report.md", caption="../report/report_md.rst", category="Report"),
    conda:
        "../envs/d5pipe.yaml"
    log:
        "logs/report/report.log",
    script:
        "../scripts/report.py"
