# d5pipe workflow: a table of contents. Run it through `d5pipe run EXPERIMENT`, which composes the
# Hydra config, writes the plan into the run directory and calls
#   snakemake --snakefile Snakefile --directory RUN ...
# Every path in the rules is relative to RUN.

from snakemake.utils import min_version

min_version("9.0")

report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/levels.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        final_outputs(),
    default_target: True
