"""MLPerf training logs: the ``mlperf`` section, and one point's ``:::MLLOG`` log written through
mlperf_logging's own logger (``mllog.MLLogger``).

A training point (level 2, and level 3's rank 0 with the point appending its evaluation) writes,
in MLPerf's order: the submission fields (``submission_org``/``platform`` from the section,
``submission_division`` ``open``, ``submission_benchmark`` the experiment's name,
``submission_status`` ``research``), ``cache_clear`` (``false``: d5pipe clears no cache),
``init_start``, the run's settings (``seed``, ``global_batch_size``, ``opt_name``,
``opt_base_learning_rate`` and the optimizer's other keys, ``gradient_accumulation_steps``,
precision and parallelism disclosures, ``train_samples``, ``eval_samples``), ``init_stop``,
``run_start``, per epoch ``epoch_start``/``epoch_stop`` (level 3: one ``block_start``/``block_stop``
over its steps), per evaluation ``eval_start``/``eval_accuracy``/``eval_stop``, and ``run_stop``
with ``status`` ``success`` (no target, or the target reached) or ``aborted`` (a target never
reached). Times are the wall clock's milliseconds, as mllog writes them.

The log is written to the point's scratch directory while it runs and copied whole (atomically) to
``RUN/mlperf/<stage>/<point_id>.log`` once checked (d5pipe.measure.mllog_check).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d5pipe.core.fields import setting

DIVISION = "open"
"""d5pipe's logs are open-division logs: its benchmarks are not MLPerf's closed ones."""
PRECISIONS = {"float64": "fp64", "float32": "fp32", "bfloat16": "bfloat16", "float16": "fp16"}
"""A d5pipe dtype as MLPerf's precision disclosures name it."""
_SERIAL = itertools.count()


@dataclass
class MlperfConf:
    """The ``mlperf`` section: MLPerf-format training logs and what they say about the submitter."""

    log: bool = True
    """Levels 2 and 3: every training point writes an MLPerf log and checks it with MLPerf's
    compliance checker (its outcome is the point's ``mllog_check``)."""
    org: str = "unaffiliated"
    """``submission_org`` of the logs."""
    platform: str = ""
    """``submission_platform`` of the logs; empty: the host's CPU model and logical CPUs."""


@dataclass(frozen=True)
class RunFacts:
    """What a training log states about its run before ``init_stop``."""

    benchmark: str
    seed: int
    global_batch_size: int
    optimizer: str
    learning_rate: float
    train_samples: int
    eval_samples: int
    precision: str = "float32"
    micro_batches: int = 1
    data_parallelism: int = 1
    optimizer_keys: tuple[tuple[str, float], ...] = ()
    """Further ``opt_*`` keys (e.g. ``("opt_weight_decay", 0.0)``)."""


def logging_on(section: dict[str, Any] | None) -> bool:
    """Whether a point given the run's ``mlperf`` section (None: not asked) writes a training log."""
    return section is not None and bool(setting(section, MlperfConf, "log"))


class _Silent:
    """What a log that writes nothing logs through."""

    def start(self, **_: Any) -> None:
        return None

    end = event = start


class TrainingLog:
    """One point's MLPerf log at ``path`` (``append``: continue one that another process wrote);
    ``path`` None: a log that writes nothing, so a training loop calls it whether or not one was asked."""

    def __init__(self, path: Path | None, section: dict[str, Any], append: bool = False) -> None:
        from mlperf_logging.mllog import constants

        self.path = None if path is None else Path(path)
        self.section = section
        self.constants = constants
        self.ml: Any = _Silent()
        self._handler: logging.Handler | None = None
        if self.path is None:
            return
        from mlperf_logging.mllog import mllog

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._logger = logging.Logger(f"d5pipe.mllog.{next(_SERIAL)}", logging.INFO)  # not kept by logging's registry
        self._logger.propagate = False
        self._handler = logging.FileHandler(self.path, mode="a" if append else "w", encoding="utf-8")
        self._logger.addHandler(self._handler)
        self.ml = mllog.MLLogger(logger=self._logger, default_stack_offset=2)

    def close(self) -> None:
        if self._handler is not None:
            self._logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def event(self, key: str, value: Any = None) -> None:
        self.ml.event(key=key, value=value)

    def start(self, facts: RunFacts) -> None:
        """The submission fields, ``init_start`` and the run's settings."""
        c = self.constants
        self.event(c.SUBMISSION_ORG, str(self.section.get("org", "")))
        self.event(c.SUBMISSION_PLATFORM, str(self.section.get("platform", "")))
        self.event(c.SUBMISSION_DIVISION, DIVISION)
        self.event(c.SUBMISSION_STATUS, c.RESEARCH)
        self.event(c.SUBMISSION_BENCHMARK, facts.benchmark)
        self.event(c.CACHE_CLEAR, False)
        self.ml.start(key=c.INIT_START)
        precision = PRECISIONS.get(facts.precision, facts.precision)
        for key, value in [
            (c.SEED, facts.seed), (c.GLOBAL_BATCH_SIZE, facts.global_batch_size), (c.OPT_NAME, facts.optimizer),
            (c.OPT_BASE_LR, facts.learning_rate), *facts.optimizer_keys,
            (c.GRADIENT_ACCUMULATION_STEPS, facts.micro_batches),
            (c.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, precision), (c.LOWEST_NUMERICAL_PRECISION_IN_ATTN, precision),
            (c.LOWEST_NUMERICAL_PRECISION_IN_COMM, precision),
            ("tensor_parallelism", 1), ("pipeline_parallelism", 1), ("context_parallelism", 1),
            ("expert_parallelism", 1),
            ("micro_batch_size", facts.global_batch_size // max(facts.data_parallelism * facts.micro_batches, 1)),
            ("config_filename", "config.yaml"),
            (c.TRAIN_SAMPLES, facts.train_samples), (c.EVAL_SAMPLES, facts.eval_samples),
        ]:
            self.event(key, value)

    def begin_run(self) -> None:
        """``init_stop`` and ``run_start``: what follows is the timed run."""
        self.ml.end(key=self.constants.INIT_STOP)
        self.ml.start(key=self.constants.RUN_START)

    def epoch_start(self, epoch: int) -> None:
        self.ml.start(key=self.constants.EPOCH_START, metadata={"epoch_num": epoch})

    def epoch_stop(self, epoch: int) -> None:
        self.ml.end(key=self.constants.EPOCH_STOP, metadata={"epoch_num": epoch})

    def block(self, start: bool, samples: int) -> None:
        """Level 3: a block of steps (``samples_count``: samples trained before it, or by its end)."""
        c = self.constants
        (self.ml.start if start else self.ml.end)(key=c.BLOCK_START if start else c.BLOCK_STOP,
                                                  metadata={"samples_count": samples})

    def evaluation(self, accuracy: float, **where: int) -> None:
        """``eval_start``, ``eval_accuracy``, ``eval_stop`` of one evaluation that has just run
        (``where``: ``epoch_num=`` or ``samples_count=``)."""
        c = self.constants
        self.ml.start(key=c.EVAL_START, metadata=where)
        self.ml.event(key=c.EVAL_ACCURACY, value=float(accuracy), metadata=where)
        self.ml.end(key=c.EVAL_STOP, metadata=where)

    def stop(self, target: float | None, reached: bool) -> None:
        """``run_stop``: ``success`` without a target or with it reached, else ``aborted``."""
        c = self.constants
        self.ml.end(key=c.RUN_STOP, metadata={"status": c.SUCCESS if target is None or reached else c.ABORTED})

