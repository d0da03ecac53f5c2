"""Level 2 declares itself (d5pipe.levels.stage.Level): training, its schema, checks, cost, what
it needs installed, compared factor and quality metric, acceptance recipes. Torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from d5pipe.core.fields import setting
from d5pipe.levels.cost_model import EVAL_S, POINT_FIXED_S, STEP_S, train_samples
from d5pipe.levels.level2 import validate
from d5pipe.levels.level2.frameworks import FRAMEWORKS
from d5pipe.levels.level2.metrics import TRAINING_METRICS
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.schema import model_requires
from d5pipe.levels.stage import Factor, Level, point_runner


def cost(cfg: Mapping[str, Any]) -> float:
    """``epochs x`` (steps per epoch x a step, plus two evaluations)."""
    train = cfg.get("train")
    epochs = int(setting(train, TrainConf, "epochs"))
    steps = math.ceil(train_samples(cfg) / max(1, int(setting(train, TrainConf, "batch_size"))))
    return POINT_FIXED_S + epochs * (steps * STEP_S + 2 * EVAL_S)


def requires(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The model's library, and the packages a built-in framework's declaration names."""
    framework = str(setting(cfg.get("train"), TrainConf, "framework"))
    packages = FRAMEWORKS[framework].packages if framework in FRAMEWORKS else ()
    return model_requires(cfg) + [(f"train.framework={framework}", p) for p in packages]


LEVEL = Level(
    name="level2", title="L2 training", sections=("model", "dataset", "train", "timer", "placement"),
    schemas={"train": TrainConf}, check_point=validate.check_point, cost=cost,
    runner=point_runner("d5pipe.levels.level2.point"),
    used_targets=validate.used_targets, check_targets=validate.check_targets, requires=requires, needs_data=True,
    recipes=True, metrics=TRAINING_METRICS,
    factors=(Factor("train.optimizer", None, ("step_time",), "optimizers", fallback="sgd", quality="test_accuracy"),
             Factor("train.micro_batches", "1", ("step_time",), "micro-batching", quality="step_peak_memory"),
             Factor("train.framework", "torch", ("step_time",), "training frameworks", quality="test_accuracy")),
)
