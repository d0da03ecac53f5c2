"""How a run executes: the ``d5pipe run`` driver (``run``), the Snakemake command (``snakemake``),
what the Snakefile asks (``snakefile_api``), job bodies (``jobs``), shard execution (``shard``),
resources, SLURM glue, status, the interleaved A/B of two runs (``ab``) and more repetitions until
decided (``decide``)."""
