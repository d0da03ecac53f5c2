"""What the Snakefile asks d5pipe: the plan of the run directory it works in.

Snakemake runs with ``--directory RUN``; every path here is relative to that directory. Each
function is called by a one-line helper in ``workflow/rules/*.smk``; the run directory's files
are parsed once per process (d5pipe.rundir.layout.RunDir.of). ``workflow/rules/levels.smk``
creates one rule per planned stage of the registry (d5pipe.levels.registry) from these answers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from d5pipe.core.stage_resources import merged_resources
from d5pipe.levels.registry import NODE_AXIS, RESOURCE_ENTRIES, STAGE_NAMES, STAGES, array_job
from d5pipe.rundir.layout import RESULTS_FILE, RunDir

THROTTLE_GRACE_S = 10
"""An array's tasks may start this many seconds after submission (``--begin=now+N``): the SLURM
plugin cannot pass ``--array=A-B%N``, so d5pipe's executor sets ``ArrayTaskThrottle`` and then
moves the start to now, before any task is eligible to start (d5pipe.execute.slurm_executor)."""
PLAN_INDEX_SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "plan_index.schema.yaml"


@functools.lru_cache(maxsize=1)
def _schema_file() -> dict[str, Any]:
    from d5pipe.core.yamlio import safe_load

    with open(PLAN_INDEX_SCHEMA, encoding="utf-8") as fh:
        schema: dict[str, Any] = safe_load(fh)
    return schema


def plan_index_schema() -> dict[str, Any]:
    """``workflow/schemas/plan_index.schema.yaml`` with its stage names taken from the registry."""
    import copy

    schema = copy.deepcopy(_schema_file())
    schema["properties"]["stages"]["propertyNames"] = {"enum": list(STAGE_NAMES)}
    return schema


def validate_index(run_dir: str | Path = ".") -> None:
    """Check ``plan/index.json`` against :func:`plan_index_schema` (jsonschema)."""
    import jsonschema

    from d5pipe.core.errors import D5PipeError

    rd = RunDir.of(run_dir)
    try:
        jsonschema.validate(rd.index, plan_index_schema())
    except jsonschema.ValidationError as exc:
        raise D5PipeError(f"{rd.index_path}: {exc.message}") from None


def enabled_stages(run_dir: str | Path = ".") -> list[str]:
    """Planned stages in pipeline order (one Snakemake rule each)."""
    return RunDir.of(run_dir).stages()


def final_outputs(run_dir: str | Path = ".") -> list[str]:
    rd = RunDir.of(run_dir)
    return [RESULTS_FILE, rd.report_html.name, rd.report_md.name, rd.verdict_path.name]


def shard_markers(run_dir: str | Path = ".") -> list[str]:
    """Marker files of every shard of every planned stage."""
    rd = RunDir.of(run_dir)
    return [str(Path("shards") / s / f"{name}.json") for s in rd.stages() for name in rd.shards(s)]


def shard_priority(wildcards: Any) -> int:
    """The ``priority:`` of a shard job: shards run in index order (``s00000`` first). Snakemake
    breaks ties between ready jobs in no fixed order, so without it the two sides of ``d5pipe ab``
    started different shards at the same time, and their jobs waited for a partner that never came
    and were measured alone."""
    return -int(str(wildcards.shard).lstrip("s") or 0)


def shard_shell(run_dir: str | Path = ".") -> str:
    """The ``shell:`` of every stage's rule: this Python runs ``d5pipe.execute.jobs`` on the job's
    shard -- locally with ``executor.fork_server`` through the run's fork server
    (``d5pipe.execute.fork_client``, which falls back to the same fresh process without one).
    Only names d5pipe made reach the shell: the stage (``params.stage``, from the registry), the
    shard (``sNNNNN`` wildcard), marker and log paths built from those, the server's socket (a
    constant); the job checks them again. (Snakemake evaluates a ``shell:`` expression when the
    job runs, so the stage comes from the rule's params, not from the loop variable that created
    the rule.)"""
    import shlex
    import sys

    from d5pipe.config.schema import forks_repetitions
    from d5pipe.execute.fork_server import SOCKET

    body = "d5pipe.execute.jobs"
    if forks_repetitions(executor_config(run_dir)):
        body = f"d5pipe.execute.fork_client {shlex.quote(SOCKET)}"
    return (f"{shlex.quote(sys.executable)} -m {body} {{params.stage:q}} {{wildcards.shard:q}} "
            "{output:q} {log:q}")


def shard_data_input(run_dir: str | Path, stage: str) -> Callable[[Any], list[str]]:
    """The ``data`` input function of a stage's rule: the prepared dataset files the points of the
    job's shard need (none for stages that need no data)."""
    def data(wildcards: Any) -> list[str]:
        points = RunDir.of(run_dir).shard_spec(stage, str(wildcards.shard))["points"]
        return [f"data/{k}.npz" for k in sorted({p["dataset"] for p in points if p.get("dataset")})]

    return data if STAGES[stage].needs_data else lambda wildcards: []


def shard_build_input(run_dir: str | Path, stage: str) -> Callable[[Any], list[str]]:
    """The ``builds`` input function of a stage's rule: the ``build_operator`` records the points of
    the job's shard need (compiled operators, d5pipe.levels.level0.compiled), each built once a run;
    a plan without builds reads no shard file for them."""
    def builds(wildcards: Any) -> list[str]:
        points = RunDir.of(run_dir).shard_spec(stage, str(wildcards.shard))["points"]
        return [f"builds/{k}.json" for k in sorted({k for p in points for k in p.get("builds") or ()})]

    return builds if RunDir.of(run_dir).index.get("builds") else lambda wildcards: []


def executor_config(run_dir: str | Path = ".") -> dict[str, Any]:
    return RunDir.of(run_dir).executor


def threads_of(ex: dict[str, Any], stage: str) -> int:
    """CPU threads of one of a stage's jobs: ``executor.resources.<stage>.cpus_per_task``.

    With any executor: Snakemake gives a rule's ``threads`` to the job as ``OMP_NUM_THREADS``
    (and the MKL/OpenBLAS/... equivalents), which torch reads at import, so this is how many
    intra-op threads every measurement of the stage uses (recorded in the shard's environment).
    """
    from d5pipe.execute.resources import resource_int

    return resource_int(merged_resources(ex, stage), "cpus_per_task", 1, f"executor.resources.{stage}")


def max_threads(ex: dict[str, Any]) -> int:
    """The most threads any stage's job asks for (the local executor's cores per job slot)."""
    return max(threads_of(ex, stage) for stage in RESOURCE_ENTRIES if stage != "default")


def stage_threads(run_dir: str | Path, stage: str) -> int:
    """The ``threads:`` of a stage's rule (see :func:`threads_of`)."""
    return threads_of(executor_config(run_dir), stage)


def stage_resources(run_dir: str | Path, stage: str) -> dict[str, Any]:
    """Snakemake resources of a stage's jobs (SLURM names; none for the local executor).

    For a stage whose shards need one task per rank (``tasks_from_ranks``), ``tasks`` and
    ``mpi`` are functions of the shard (:func:`shard_tasks`, :func:`shard_mpi`). An array stage's
    tasks may start :data:`THROTTLE_GRACE_S` after submission unless d5pipe's executor starts them
    sooner, and a job that is not an array task takes one slot of
    :data:`~d5pipe.execute.slurm_arrays.SLOTS` (d5pipe.execute.slurm_arrays).
    """
    from d5pipe.execute.slurm_arrays import SLOTS, arrays_on

    ex = executor_config(run_dir)
    if ex.get("name") != "slurm":
        return {}
    from d5pipe.execute.resources import snakemake_resources

    out = snakemake_resources(merged_resources(ex, stage))
    placed = stage in STAGES and _placed(run_dir, stage)
    if placed:
        partition = str(merged_resources(ex, stage).get("partition") or "")
        out["slurm_extra"] = lambda wildcards: shard_nodelist(run_dir, stage, str(wildcards.shard), partition)
    elif array_job(stage, placed) and arrays_on(ex):
        out["slurm_extra"] = f"--begin=now+{THROTTLE_GRACE_S}"
    if arrays_on(ex) and not array_job(stage, placed):
        out[SLOTS] = 1
    if stage in STAGES and STAGES[stage].tasks_from_ranks:
        out["tasks"] = lambda wildcards: shard_tasks(run_dir, stage, str(wildcards.shard))
        out["mpi"] = lambda wildcards: shard_mpi(run_dir, stage, str(wildcards.shard))
        out["nodes"] = lambda wildcards: shard_nodes(run_dir, stage, str(wildcards.shard))
    return out


def _placed(run_dir: str | Path, stage: str) -> bool:
    from d5pipe.execute.placement import node_of

    rd = RunDir.of(run_dir)
    return NODE_AXIS in (rd.index["stages"].get(stage) or {}).get("axes", []) or node_of(rd.config) > 0


def shard_nodelist(run_dir: str | Path, stage: str, shard: str, partition: str) -> str:
    """``--nodelist=<node>`` for a shard whose points are pinned to a node (d5pipe.execute.placement)."""
    from d5pipe.core.errors import D5PipeError
    from d5pipe.execute.placement import node_of, nodelist_option

    rd = RunDir.of(run_dir)
    fixed = node_of(rd.config)
    indices = {int(p["params"].get(NODE_AXIS, fixed) or 0) for p in rd.shard_spec(stage, shard)["points"]}
    if len(indices) != 1:
        raise D5PipeError(f"plan/{stage}/{shard}.json: a shard mixes nodes {sorted(indices)} (re-plan the run)")
    return nodelist_option(indices.pop(), partition)


def _shard_most(run_dir: str | Path, stage: str, shard: str, key: str, resource: str) -> int:
    """The most ``distributed.<key>`` among a shard's points, at least the configured
    ``executor.resources.<stage>.<resource>``."""
    from d5pipe.plan.point_config import point_config, stage_base

    rd = RunDir.of(run_dir)
    base = stage_base(rd.config, stage)
    return max([int(merged_resources(rd.executor, stage)[resource]),
                *(int(point_config(base, p["params"]).get("distributed", {}).get(key, 1) or 1)
                  for p in rd.shard_spec(stage, shard)["points"])])


def shard_nodes(run_dir: str | Path, stage: str, shard: str) -> int:
    """SLURM nodes of a shard's job: the most ``distributed.nodes`` among its points, at least
    the configured ``executor.resources.<stage>.nodes``."""
    return _shard_most(run_dir, stage, shard, "nodes", "nodes")


def shard_tasks(run_dir: str | Path, stage: str, shard: str) -> int:
    """SLURM tasks of a shard's job: the most ``distributed.ranks`` among its points.

    At least the configured ``executor.resources.<stage>.tasks``. The points of a shard run one
    after another inside the job, each starting its ranks with ``srun -n <ranks>`` in it.
    """
    return _shard_most(run_dir, stage, shard, "ranks", "tasks")


def shard_mpi(run_dir: str | Path, stage: str, shard: str) -> str:
    """The plugin's ``mpi`` resource for a shard: ``"srun"`` when its job has several tasks.

    Empty otherwise (snakemake-executor-plugin-slurm rejects ``mpi`` with one task); either way
    the rule then runs directly in the batch step, not inside ``srun -n1``.
    """
    from d5pipe.execute.resources import SRUN_LAUNCHER

    return SRUN_LAUNCHER if shard_tasks(run_dir, stage, shard) > 1 else ""
