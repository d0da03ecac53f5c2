"""The root structured config (what ``conf/config.yaml`` composes into) and its registration.

Every config group has its schema registered in Hydra's ConfigStore (:func:`register`): the root
``d5pipe_schema`` plus one ``<group>/schema`` node per group, so a group YAML
(``conf/<group>/<option>.yaml``) lists ``schema`` in its defaults and says only what differs from it.
Sections a level reads are defined next to that level (``d5pipe.levels.*.schema``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Optional

from omegaconf import MISSING

from d5pipe.core.fields import at_least, between, choice, positive
from d5pipe.levels.registry import RECIPE_STAGE, SECTION_SCHEMAS, STAGE_NAMES
from d5pipe.levels.schema import DatasetConf, ModelConf
from d5pipe.measure import compare_defaults
from d5pipe.measure.mllog import MlperfConf
from d5pipe.measure.profile import ProfileConf
from d5pipe.measure.timer_schema import TimerConf

EXECUTORS: tuple[str, ...] = ("local", "slurm")
ACCEPTANCE_OPS: tuple[str, ...] = (">=", "<=")


@dataclass
class SweepConf:
    grid: dict[str, list[Any]] = field(default_factory=dict)
    """Cartesian axes: dotted config key -> list of values."""
    zip: list[dict[str, list[Any]]] = field(default_factory=list)
    """Groups of axes that vary together (equal lengths); each group is one axis of the product."""
    exclude: list[dict[str, Any]] = field(default_factory=list)
    """Partial assignments (axis key -> value); matching points are dropped."""


@dataclass
class AcceptanceConf:
    metric: str = MISSING
    """Metric name as in ``results.parquet`` (e.g. ``test_accuracy``)."""
    op: str = choice(">=", ACCEPTANCE_OPS)
    """How the metric must compare with ``value`` to pass."""
    value: float = MISSING
    """The threshold."""
    stage: str = choice(RECIPE_STAGE, STAGE_NAMES)
    """The level whose points are judged."""


@dataclass
class RecipeConf:
    fixed: list[str] = field(default_factory=list)
    """Config keys (dotted) the sweep may not vary."""
    acceptance: list[AcceptanceConf] = field(default_factory=list)
    """Thresholds that turn a metric into pass/fail rows; changing them and re-running re-evaluates
    verdicts without re-measuring."""


@dataclass
class ShardsConf:
    points_per_shard: int = at_least(0, 0)
    """Points per shard job; 0 (default): as many as make ``target_s`` of expected work."""
    target_s: float = positive(60.0)
    """Expected seconds of work per shard job when ``points_per_shard`` is 0 (d5pipe.plan.cost)."""
    max_jobs_per_stage: int = at_least(0, 0)
    """When > 0, shards are made larger so that no stage has more jobs than this."""
    point_timeout_s: float = at_least(1800.0, 0.0)
    """Wall-clock limit of one point; a point past it is killed and recorded ``failed`` (0: none)."""
    max_attempts: int = at_least(2, 1)
    """Starts of a point whose process died with it (a killed or crashed shard job) before the
    point is recorded ``failed`` instead of being tried again."""


@dataclass
class PlacementConf:
    node: int = at_least(0, 0)
    """Which node a point runs on. 0 (default): wherever the scheduler puts it. k >= 1: the k-th
    distinct node of the stage's SLURM partition (``sinfo``, in natural name order), so the axis
    ``placement.node: [1, 2, 3]`` runs every point on each of three distinct nodes and the report
    sets the spread between nodes next to the CI within a node (d5pipe.execute.placement).
    A local run has one node: points with k >= 2 are skipped there."""


@dataclass
class ResourcesConf:
    """One entry of ``executor.resources``: a field left null (unset) is inherited, stage entry ->
    ``default`` -> :data:`RESOURCE_DEFAULTS`."""

    partition: Optional[str] = None
    """SLURM partition (``--partition``)."""
    account: Optional[str] = None
    """SLURM account (``--account``)."""
    runtime_min: Optional[int] = at_least(None, 1)
    """Time limit of a job, in minutes."""
    nodes: Optional[int] = at_least(None, 1)
    """Nodes per job."""
    tasks: Optional[int] = at_least(None, 1)
    """Tasks per job."""
    cpus_per_task: Optional[int] = at_least(None, 1)
    """CPU threads per task, locally too (handed to torch as ``OMP_NUM_THREADS``)."""
    mem_mb: Optional[int] = at_least(None, 1)
    """Memory per job, in MB."""
    gpus: Optional[int] = at_least(None, 0)
    """GPUs per job."""


@dataclass
class ExecutorConf:
    name: str = choice("local", EXECUTORS)
    """Where shard jobs run (``d5pipe run --executor`` sets it)."""
    jobs: int = at_least(1, 1)
    """Jobs in flight (local: parallel shard processes; slurm: the run's tasks pending or running, across
    stages and arrays; d5pipe.execute.slurm_arrays)."""
    profile: str = ""
    """Snakemake profile directory (``profiles/slurm`` for SLURM)."""
    retries: int = at_least(0, 0)
    """Snakemake ``--retries``: restarts of a failed job."""
    arrays: bool = True
    """SLURM: submit the shards of a stage as one job array (not level 3, whose shards differ in tasks)."""
    array_limit: int = at_least(1000, 1)
    """SLURM: most array tasks per sbatch call (bigger arrays are split)."""
    array_throttle: int = at_least(0, 0)
    """SLURM: most tasks of one array running at once (0: no cap but ``jobs``; d5pipe.execute.slurm_arrays)."""
    poll_s: float = at_least(10.0, 1.0)
    """SLURM: seconds between d5pipe's looks at the queue while a submission waits or a throttle may rise
    (one ``squeue`` for the whole run; d5pipe.execute.slurm_executor)."""
    watchdog_s: int = at_least(300, 10)
    """SLURM: stop the run (exit 75) when shards are pending, SLURM holds no job of the run and nothing
    has changed for this long (d5pipe.execute.slurm_watchdog); above the plugin's 180 s status interval."""
    driver_runtime_min: int = at_least(1440, 1)
    """SLURM, ``d5pipe run --detach``: the driver job's time limit (minutes)."""
    resources: dict[str, ResourcesConf] = field(default_factory=dict)
    """Per stage (``level0``..``level3``, ``default``) SLURM resources."""
    extra_args: list[str] = field(default_factory=list)
    """Further Snakemake arguments, each one argument (e.g. ``--workflow-profile DIR``)."""
    fork_server: bool = False
    """Local: start each shard job (so each repetition) as a fork of a server that has imported torch
    and d5pipe once, not as a fresh interpreter (d5pipe.execute.fork_server); SLURM jobs are always
    fresh processes. Each point's record says how its process started (``provenance.process_start``).
    Off by default: a one-point level-0 run takes 2.6x less time with it, but that its repetitions
    spread no less than fresh processes' is not shown. Whole runs read its spread a quarter to a
    half lower; there a fresh run lasts longer and sees more drift. Within one time window, through
    d5pipe's own shard jobs, forks read 0.52-1.05 of fresh processes' spread (0.83-0.99 in the
    longest run), never "not lower" at a 10% margin (docs/performance.md). The report says how a
    run's repetitions started."""


def forks_repetitions(executor: Mapping[str, Any]) -> bool:
    """Whether a run with this executor config starts its shard jobs, so its repetitions, as forks
    of a fork server (local runs with ``fork_server``; SLURM jobs are always fresh processes)."""
    return executor.get("name", "local") == "local" and bool(executor.get("fork_server", False))


@dataclass
class ReportConf:
    title: str = ""
    """Title of ``report.html`` (empty: ``d5pipe report: <experiment name>``)."""
    alpha: float = between(compare_defaults.ALPHA, 0.0, 1.0)
    """Level of the side-by-side tables' test for a change, over all pairs of the run (Holm)."""
    margin: float = between(compare_defaults.MARGIN, 0.0, 10.0)
    """Equivalence margin of the side-by-side tables: a pair whose whole 95% CI of the speedup lies
    within x(1 + margin) either way is equivalent (d5pipe.results.timing_compare)."""


@dataclass
class RootConf:
    """The root's own sections; :data:`D5Config` adds the sections the levels own."""

    name: str = MISSING
    """Experiment name (set by the experiment file)."""
    description: str = ""
    """A paragraph shown first in the report's overview."""
    seed: int = 0
    """Root seed; per-point and per-rank seeds derive from it (d5pipe.core.seeds)."""
    repetitions: int | None = at_least(None, 1)
    """Each point is measured this many times, each time in a separate shard job (a separate process,
    later in time) with its own derived seed; the repetitions are the axis ``repeat``. Null (the
    default): each level's own number (d5pipe.levels.stage.Level.repetitions: 10 for level 0, whose
    points are cheap, 3 for the others); a number sets every level's. Timings are
    compared across runs by their repetitions, one value per process (its fastest sample for a timer's
    timing; d5pipe.results.timing_compare): with one repetition per side a timing is not compared."""
    stages: list[str] = field(default_factory=list)
    """Enabled levels: any of d5pipe.levels.registry.STAGE_NAMES, in any order, at least one."""
    sweep: SweepConf = field(default_factory=SweepConf)
    recipe: RecipeConf = field(default_factory=RecipeConf)
    shards: ShardsConf = field(default_factory=ShardsConf)
    timer: TimerConf = field(default_factory=TimerConf)
    profile: ProfileConf = field(default_factory=ProfileConf)
    """A profiled pass per point after its timed pass (d5pipe.measure.profile); not part of a
    point's identity: the timed results are the same with and without it."""
    mlperf: MlperfConf = field(default_factory=MlperfConf)
    """MLPerf-format training logs checked by MLPerf's compliance checker (d5pipe.measure.mllog); not
    part of a point's identity."""
    model: ModelConf = field(default_factory=ModelConf)
    dataset: DatasetConf = field(default_factory=DatasetConf)
    placement: PlacementConf = field(default_factory=PlacementConf)
    executor: ExecutorConf = field(default_factory=ExecutorConf)
    report: ReportConf = field(default_factory=ReportConf)


D5Config: type = make_dataclass(
    "D5Config", [(name, cls, field(default_factory=cls)) for name, cls in SECTION_SCHEMAS.items()], bases=(RootConf,))
"""The root structured config: :class:`RootConf` plus one section per level-owned schema
(d5pipe.levels.registry.SECTION_SCHEMAS)."""
D5Config.__module__ = __name__

GROUP_SCHEMAS: dict[str, type] = {
    "timer": TimerConf,
    "model": ModelConf,
    "dataset": DatasetConf,
    **SECTION_SCHEMAS,
    "executor": ExecutorConf,
}
"""Config group -> its schema; each is stored in the ConfigStore as ``<group>/schema``."""

_REGISTERED = False


def register() -> None:
    """Register the root schema and one schema per group in Hydra's ConfigStore (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="d5pipe_schema", node=D5Config)
    for group, node in GROUP_SCHEMAS.items():
        cs.store(group=group, name="schema", node=node)
    _REGISTERED = True
