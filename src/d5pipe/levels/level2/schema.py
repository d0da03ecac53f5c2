"""Schema of the ``train`` section (level 2; level 3 reads it too). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from d5pipe.core.fields import at_least, between, later, positive
from d5pipe.levels.declare import Builtin, declared
from d5pipe.levels.level2.early_stop import MODES as EARLY_STOP_MODES

OPTIMIZERS: dict[str, Builtin] = declared(
    Builtin("sgd", "d5pipe.levels.optim.sgd", args=("lr", "momentum", "weight_decay")),
    Builtin("adam", "d5pipe.levels.optim.adam", args=("lr", "weight_decay")),
    Builtin("adamw", "d5pipe.levels.optim.adamw", args=("lr", "weight_decay")))
"""The built-in optimizers of ``train.optimizer`` (called with ``params``)."""
SCHEDULES: dict[str, Builtin] = declared(
    Builtin("constant", "d5pipe.levels.optim.constant"), Builtin("cosine", "d5pipe.levels.optim.cosine", args=("epochs",)),
    Builtin("step", "d5pipe.levels.optim.step", args=("epochs", "step_epochs", "gamma")))
"""The built-in schedules of ``train.schedule`` (called with ``optimizer``)."""
SAMPLERS: dict[str, Builtin] = declared(Builtin("shuffle", f"{__package__}.sampling.shuffle"))
"""The built-in samplers of ``train.sampler`` (called with ``n, labels, generator``)."""
METRICS: dict[str, Builtin] = declared(Builtin("macro_f1", f"{__package__}.metrics.macro_f1"))
"""The built-in extra metrics of ``train.metrics``."""


@dataclass
class TrainConf:
    optimizer: str = "adam"
    """``sgd`` (with ``momentum``), ``adam``, ``adamw`` or a key of ``custom_optimizers``."""
    custom_optimizers: dict[str, Any] = field(default_factory=dict)
    """User optimizers: name -> target (any ``torch.optim.Optimizer``; d5pipe passes ``params``)."""
    lr: float = positive(1e-3)
    """Learning rate."""
    momentum: float = at_least(0.9, 0.0)
    """Momentum of the built-in ``sgd``."""
    weight_decay: float = at_least(0.0, 0.0)
    """Weight decay passed to the optimizer."""
    schedule: str = "constant"
    """``constant``, ``cosine`` (to 0 over all epochs), ``step`` (x ``gamma`` every ``step_epochs``)
    or a key of ``custom_schedulers``. Stepped once per epoch."""
    custom_schedulers: dict[str, Any] = field(default_factory=dict)
    """User LR schedulers: name -> target (any ``torch.optim.lr_scheduler``; d5pipe passes ``optimizer``)."""
    step_epochs: int = at_least(0, 0)
    """``step`` schedule period in epochs; 0 means max(1, epochs // 3)."""
    gamma: float = positive(0.1)
    """``step`` schedule: the factor applied to the learning rate every ``step_epochs``."""
    batch_size: int = at_least(32, 1)
    """Training samples per step."""
    eval_batch_size: int = at_least(512, 1)
    """Samples per batch when evaluating on the test split."""
    epochs: int = at_least(5, 1)
    """Passes over the training split."""
    deterministic: bool = True
    """Deterministic algorithms: a re-run ends with the same ``weights_sha256`` (false: that checksum is informational only)."""
    target_accuracy: Optional[float] = between(0.9, 0.0, 1.0, closed_high=True)  # noqa: UP045
    """Test accuracy whose first crossing gives ``time_to_target_s``; null disables it."""
    early_stop: str = later("off", choices=EARLY_STOP_MODES)
    """Stop before ``epochs``: ``target`` once the test accuracy reaches ``target_accuracy``;
    ``plateau`` once the test loss has not improved by more than ``early_stop_min_delta`` for
    ``early_stop_patience`` epochs; ``either``: whichever first (d5pipe.levels.level2.early_stop).
    The record says why training stopped; ``epochs_run`` how many epochs ran."""
    early_stop_patience: int = later(3, min=1)
    """``plateau``: epochs without improvement of the test loss before stopping."""
    early_stop_min_delta: float = later(0.0, min=0.0)
    """``plateau``: the least decrease of the test loss that counts as an improvement."""
    num_workers: int = at_least(0, 0)
    """DataLoader worker processes that gather (or generate) the training batches; 0: the training
    process itself, without DataLoader machinery for data held in memory."""
    pin_memory: Optional[bool] = later(None)  # noqa: UP045
    """Level 2, with ``num_workers`` > 0: the DataLoader's ``pin_memory``; null: pinned when
    ``train.device`` is CUDA."""
    prefetch_factor: int = later(2, min=1)
    """Level 2, with ``num_workers`` > 0: batches each worker loads ahead (torch's default, 2)."""
    persistent_workers: bool = later(False)
    """Level 2, with ``num_workers`` > 0: keep the workers between epochs instead of starting
    them at each epoch's first batch (that start is part of ``first_batch_s``)."""
    augment: str = later("none", choices=("none", "flip"))
    """Level 2: per-sample augmentation in the loader: ``flip`` mirrors each drawn sample left-right
    with probability 1/2, by a hash of the training seed, epoch and index (the same samples in every
    loader and storage; d5pipe.levels.level2.augment)."""
    measure_loader: bool = later(False)
    """Level 2: after training, also time one epoch of the loader alone (``loader_samples_per_s``)
    and steps on batches already in memory (``step_time_in_memory``, ``model_samples_per_s``: what
    the model consumes when it never waits), on a copy of the model."""
    sampler: str = later("shuffle")
    """Level 2: the order of the training samples in an epoch: ``shuffle`` (a seeded permutation
    per epoch) or a key of ``custom_samplers``, whose sampler is checked before training
    (d5pipe.levels.level2.sampler_check)."""
    custom_samplers: dict[str, Any] = later({})
    """User samplers: name -> target called with ``n`` (training samples), ``labels`` (their
    int64 labels) and ``generator`` (a seeded ``torch.Generator``), returning an iterable of
    sample indices per epoch (a ``torch.utils.data.Sampler``)."""
    sampler_alpha: float = later(1e-3, gt=0.0, lt=1.0)
    """The class-histogram check of a user sampler fails below this chi-square p-value."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    peak: bool = True
    """Measure the machine's matmul FLOP/s once per shard process and report ``pct_peak_flops``
    of the training throughput (FLOPs per sample are counted either way)."""
    log_every: int = at_least(1, 1)
    """Write every n-th step to ``steps.jsonl``."""
    reference_optimizer: str = ""
    """Level 2: an optimizer (built-in or custom) the point's optimizer must agree with: both run
    ``reference_steps`` steps from the same weights on the same batches (``optimizer_check``)."""
    reference_steps: int = at_least(20, 1)
    """Steps both optimizers take for ``optimizer_check`` (with ``reference_optimizer``)."""
    reference_tolerance: float = at_least(1e-3, 0.0)
    """Largest accepted parameter divergence, relative to how far the reference moved the weights."""
    detect_rel_error: float = positive(0.01)
    """A tolerance at or above this relative error cannot see it: the check says ``undetectable``."""
    metrics: list[Any] = field(default_factory=list)
    """Extra metrics after training: built-in names (``macro_f1``) or targets called as
    ``fn(model, x_test, y_test)`` returning a number or a mapping name -> number."""
    micro_batches: int = later(1, min=1)
    """Level 2: each batch split into this many micro-batches whose gradients are accumulated
    before the optimizer step -- the full batch's gradient with less activation memory, unless a
    layer couples the samples of a batch (BatchNorm): ``micro_batch_check`` compares the two
    gradients on the first batch before training and fails when they differ."""
    micro_batch_tolerance: float = later(1e-4, min=0.0)
    """Largest relative L2 error of the accumulated gradient against the full batch's."""
    framework: str = later("")
    """Level 2: train through d5pipe's framework loop on ``torch``, ``compile`` (torch.compile),
    ``jax`` (XLA, optax), ``tensorflow`` (keras optimizers) or a key of ``custom_frameworks``: the
    model traced once and built natively, every framework of a configuration starting from the
    same weights and batches and checked over ``framework_check_steps`` steps against PyTorch in
    float64 before it is timed (d5pipe.levels.level2.frameworks). Empty: the level-2 training loop."""
    custom_frameworks: dict[str, Any] = later({})
    """User training frameworks: name -> target called with ``model`` (the point's torch module)
    and ``dtype``, returning a d5pipe.levels.level2.frameworks.contract.TrainingFramework."""
    framework_check_steps: int = later(3, min=1)
    """Steps of the check against the float64 reference (the first batches of the first epoch)."""
    measure_memory: bool = later(False)
    """Level 2: report ``step_peak_memory``, the peak tensor memory of one batch's forward and
    backward (its micro-batches included; d5pipe.measure.memory), after training."""
