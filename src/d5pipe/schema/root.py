"""The root structured config (what ``conf/config.yaml`` composes into)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from d5pipe.schema.distributed import DistributedConf
from d5pipe.schema.level0 import OperatorsConf
from d5pipe.schema.model import DatasetConf, Level1Conf, ModelConf, TrainConf
from d5pipe.schema.timer import TimerConf


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
    op: str = ">="
    value: float = MISSING
    stage: str = "level2"


@dataclass
class RecipeConf:
    fixed: list[str] = field(default_factory=list)
    """Config keys (dotted) the sweep may not vary."""
    acceptance: list[AcceptanceConf] = field(default_factory=list)


@dataclass
class ShardsConf:
    points_per_shard: int = 16
    max_jobs_per_stage: int = 0
    """When > 0, shards are made larger so that no stage has more jobs than this."""


RESOURCE_DEFAULTS: dict[str, Any] = {
    "partition": "", "account": "", "runtime_min": 30, "nodes": 1, "tasks": 1,
    "cpus_per_task": 1, "mem_mb": 2048, "gpus": 0,
}
"""What a resource takes when neither the stage's entry nor ``default`` sets it."""


@dataclass
class ResourcesConf:
    """One entry of ``executor.resources``: a field left null (unset) is inherited, stage entry ->
    ``default`` -> :data:`RESOURCE_DEFAULTS`."""

    partition: Optional[str] = None
    account: Optional[str] = None
    runtime_min: Optional[int] = None
    nodes: Optional[int] = None
    tasks: Optional[int] = None
    cpus_per_task: Optional[int] = None
    mem_mb: Optional[int] = None
    gpus: Optional[int] = None


@dataclass
class ExecutorConf:
    name: str = "local"
    jobs: int = 1
    profile: str = ""
    """Snakemake profile directory (``profiles/slurm`` for SLURM)."""
    retries: int = 0
    resources: dict[str, ResourcesConf] = field(default_factory=dict)
    """Per stage (``level0``..``level3``, ``default``) SLURM resources."""
    extra_args: list[str] = field(default_factory=list)


@dataclass
class ReportConf:
    title: str = ""
    alpha: float = 0.05


@dataclass
class D5Config:
    name: str = MISSING
    """Experiment name (set by the experiment file)."""
    description: str = ""
    seed: int = 0
    """Root seed; per-point and per-rank seeds derive from it (d5pipe.seeds)."""
    stages: list[str] = field(default_factory=list)
    """Enabled levels: any of level0, level1, level2, level3."""
    sweep: SweepConf = field(default_factory=SweepConf)
    recipe: RecipeConf = field(default_factory=RecipeConf)
    shards: ShardsConf = field(default_factory=ShardsConf)
    timer: TimerConf = field(default_factory=TimerConf)
    operators: OperatorsConf = field(default_factory=OperatorsConf)
    model: ModelConf = field(default_factory=ModelConf)
    dataset: DatasetConf = field(default_factory=DatasetConf)
    level1: Level1Conf = field(default_factory=Level1Conf)
    train: TrainConf = field(default_factory=TrainConf)
    distributed: DistributedConf = field(default_factory=DistributedConf)
    executor: ExecutorConf = field(default_factory=ExecutorConf)
    report: ReportConf = field(default_factory=ReportConf)


STAGES: tuple[str, ...] = ("level0", "level1", "level2", "level3")

STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "level0": ("operators", "timer"),
    "level1": ("model", "dataset", "level1", "timer"),
    "level2": ("model", "dataset", "train", "timer"),
    "level3": ("model", "dataset", "train", "distributed", "timer"),
}
"""Which config sections each stage reads; a point's ID hashes exactly these (plus name and seed)."""

SWEEPABLE_SECTIONS: frozenset[str] = frozenset(
    s for sections in STAGE_SECTIONS.values() for s in sections
)
