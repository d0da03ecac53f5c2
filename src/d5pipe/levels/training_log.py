"""A training point's MLPerf log (d5pipe.measure.mllog), from opening to checked: levels 2 and 3.

The log is written to the point's scratch directory (``work/<stage>/<point_id>/mllog.log``) as the
run goes; :func:`checked` runs MLPerf's compliance checker over it (d5pipe.measure.mllog_check)
and copies it whole to ``RUN/mlperf/<stage>/<point_id>.log``, part of the bundle, beside the MLPerf
ruleset it was checked against (``RUN/mlperf/mlperf_training_<ruleset>_open.yaml``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from d5pipe.core.atomic import write_bytes
from d5pipe.core.outcome import Metric
from d5pipe.levels.contract import PointContext
from d5pipe.measure.mllog import RunFacts, TrainingLog, logging_on
from d5pipe.measure.mllog_check import check_log

LOG_NAME = "mllog.log"


class TrainSettings(Protocol):
    """What a log states of the ``train`` section (level 2's TrainConf has it)."""

    optimizer: str
    lr: float
    weight_decay: float
    micro_batches: int


def log_path(ctx: PointContext) -> Path | None:
    """Where the point writes its log while it runs; None when the run asks none (``mlperf.log``
    false) or the caller keeps no MLPerf files (no ``mlperf_dir``)."""
    return Path(ctx.work_dir) / LOG_NAME if logging_on(ctx.mlperf) and ctx.mlperf_dir is not None else None


def point_log(ctx: PointContext, append: bool = False) -> TrainingLog:
    """The point's log (silent where :func:`log_path` is None)."""
    return TrainingLog(log_path(ctx), ctx.mlperf or {}, append)


def facts(experiment: str, seed: int, train: TrainSettings, global_batch: int, n_train: int, n_test: int,
          ranks: int = 1) -> RunFacts:
    """What the log states before ``init_stop``: the point's experiment, training seed and settings."""
    return RunFacts(benchmark=experiment, seed=seed, global_batch_size=global_batch, optimizer=train.optimizer,
                    learning_rate=train.lr, train_samples=n_train, eval_samples=n_test,
                    micro_batches=train.micro_batches, data_parallelism=ranks,
                    optimizer_keys=(("opt_weight_decay", train.weight_decay),))


def checked(ctx: PointContext, log: TrainingLog, seed: int, global_batch: int) -> tuple[list[Metric], dict[str, Any]]:
    """Close ``log``, check it, keep it in the run directory: (``mllog_check``, the record's
    ``extra.mllog``); nothing for a silent log."""
    log.close()
    if log.path is None or ctx.mlperf_dir is None:
        return [], {}
    compliance = check_log(log.path, seed, global_batch, Path(ctx.mlperf_dir).parent, Path(ctx.work_dir))
    dest = Path(ctx.mlperf_dir) / f"{ctx.point_id}.log"
    write_bytes(dest, log.path.read_bytes(), durable=False)  # whole, atomically
    return [compliance.metric()], {"mllog": compliance.record(os.path.relpath(dest, ctx.run_dir))}
