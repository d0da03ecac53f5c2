# Results and the report, in one job: records -> results.parquet (checks, verdicts) -> report.


rule report:
    input:
        all_shard_markers,
        "plan/checks.json",  # verdicts follow the current recipe without re-measuring
    output:
        results=report("results.parquet", caption="../report/results.rst", category="Results"),
        html=report("report.html", caption="../report/report_html.rst", category="Report"),
        md=report("report.md", caption="../report/report_md.rst", category="Report"),
        verdict="verdict.json",
    conda:
        "../envs/d5pipe.yaml"
    log:
        "logs/report/report.log",
    script:
        "../scripts/report.py"
