# Datasets: one job per distinct dataset config, shared by every point that uses it.


rule prepare_data:
    output:
        data="data/{dataset}.npz",
        meta="data/{dataset}.json",
    conda:
        "../envs/d5pipe.yaml"
    threads: d5api.stage_threads(".", "prepare_data")
    log:
        "logs/prepare_data/{dataset}.log",
    resources:
        **d5api.stage_resources(".", "prepare_data"),
    script:
        "../scripts/prepare_data.py"
