"""Level 3 declares itself (d5pipe.levels.stage.Level): distributed training, its schema, checks,
cost, what it derives (speedup and efficiency against the 1-rank point), compared factor, quality
metric and metrics. Torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.fields import setting
from d5pipe.levels.cost_model import POINT_FIXED_S, STEP_S
from d5pipe.levels.level3 import validate
from d5pipe.levels.level3.metrics import DISTRIBUTED_METRICS
from d5pipe.levels.level3.schema import DistributedConf
from d5pipe.levels.schema import model_requires
from d5pipe.levels.stage import Factor, Level, point_runner


def cost(cfg: Mapping[str, Any]) -> float:
    """``(warmup_steps + steps) x`` a step ``x ranks`` (the cores are shared), plus the serial
    check's steps; a rank session's launch is paid once per shard."""
    dist = cfg.get("distributed")
    steps = int(setting(dist, DistributedConf, "warmup_steps")) + int(setting(dist, DistributedConf, "steps"))
    ranks = int(setting(dist, DistributedConf, "ranks"))
    serial = steps * STEP_S if setting(dist, DistributedConf, "serial_check") else 0.0
    return POINT_FIXED_S + steps * STEP_S * ranks + serial


def derive(df: Any) -> Any:
    from d5pipe.levels.level3.scaling import derive_scaling

    return derive_scaling(df)


LEVEL = Level(
    name="level3", title="L3 distributed",
    sections=("model", "dataset", "train", "distributed", "timer", "placement"),
    schemas={"distributed": DistributedConf}, check_point=validate.check_point, cost=cost,
    runner=point_runner("d5pipe.levels.level3.point"),
    used_targets=validate.used_targets, check_targets=validate.check_targets, requires=model_requires, derive=derive, parallel_axis="distributed.ranks",
    needs_data=True, tasks_from_ranks=True, metrics=DISTRIBUTED_METRICS,
    factors=(Factor("distributed.backend", "ddp", ("time_per_step_s", "collective_time_s"), "backends",
                    quality="final_loss"),
             Factor("distributed.strategy", "allreduce", ("time_per_step_s",), "strategies", quality="final_loss")),
)
