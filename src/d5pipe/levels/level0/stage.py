"""Level 0 declares itself (d5pipe.levels.stage.Level): operators, their schema, checks, cost,
compared factor, metrics. Torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.fields import setting
from d5pipe.levels.cost_model import COMPILE_S, POINT_FIXED_S, timed_s
from d5pipe.levels.level0 import validate
from d5pipe.levels.level0.frameworks import DEFAULT
from d5pipe.levels.level0.metrics import OPERATOR_METRICS
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.stage import Factor, Level, point_runner


def cost(cfg: Mapping[str, Any]) -> float:
    """One timed call site; ``impl: compile`` adds a compilation (the machine peak is measured once
    per shard, not per point)."""
    impl = setting(cfg.get("operators"), OperatorsConf, "impl")
    return POINT_FIXED_S + timed_s(cfg, 1) + (COMPILE_S if impl == "compile" else 0.0)


LEVEL = Level(
    name="level0", title="L0 operators", sections=("operators", "timer", "placement"),
    schemas={"operators": OperatorsConf}, check_point=validate.check_point, cost=cost,
    runner=point_runner("d5pipe.levels.level0.point"),
    used_targets=validate.used_targets, check_targets=validate.check_targets, builds=validate.builds,
    # a framework's speed is read with its forward error against the float64 reference beside it
    factors=(Factor("operators.impl", "eager", ("time",), "implementations"),
             Factor("operators.framework", DEFAULT.name, ("time",), "frameworks", quality="err_l2"),
             # a user operator against the built-in its spec names in compare_to (a compiled one's too)
             Factor("operators.op", None, ("time",), "user operators", quality="err_l2",
                    baseline_metric="compare_to")),
    metrics=OPERATOR_METRICS,
    cost_reads=("operators.impl", "timer"),
    check_reads=("operators.op", "operators.custom", "operators.allowed_prefixes", "operators.device",
                 "operators.framework", "operators.impl", "operators.layout", "timer"),
    # a point is a fraction of a second: ten processes cost little, and two runs measured apart need
    # them to find a 25% slowdown on a shared VM (benchmarks/bench_compare_power.py: 30/30 with ten,
    # 13/30 with three)
    repetitions=10,
)
