# Results and the report, in one job: records -> results.parquet (checks, verdicts) -> report.
# A local rule run in a thread of Snakemake's own process (`run:` with --force-use-threads): no
# new interpreter, and its libraries are imported in the background while the shards run
# (d5pipe.execute.jobs.preload_report, started once the DAG is built). Under SLURM it also runs where Snakemake runs.
import d5pipe.execute.jobs as d5jobs


onstart:
    d5jobs.preload_report(workflow.is_main_process)


localrules:
    report,


rule report:
    input:
        all_shard_markers,
        "plan/checks.json",  # verdicts follow the current recipe without re-measuring
    output:
        results=report("results.parquet", caption="../report/results.rst", category="Results"),
        html=report("report.html", caption="../report/report_html.rst", category="Report"),
        md=report("report.md", caption="../report/report_md.rst", category="Report"),
        verdict="verdict.json",
    log:
        "logs/report/report.log",
    run:
        d5jobs.report_in_process(output, log)
