"""Schema of the ``model``, ``dataset``, ``level1`` and ``train`` sections (levels 1 and 2).

Stage runners receive these sections as plain dicts; :func:`conf_from_dict` turns one into its
dataclass, filling defaults and rejecting unknown keys with a one-line :class:`D5PipeError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from d5pipe.errors import D5PipeError


@dataclass
class ModelConf:
    name: str = "mlp"
    """``mlp``, ``cnn`` (residual blocks, needs (C,H,W) input) or ``transformer``."""
    hidden: list[int] = field(default_factory=lambda: [64])
    """MLP hidden layer widths."""
    channels: int = 16
    """CNN channels of every residual block."""
    blocks: int = 2
    """CNN residual blocks."""
    d_model: int = 64
    """Transformer embedding width (a multiple of ``heads``)."""
    heads: int = 4
    layers: int = 2
    """Transformer encoder layers."""
    ff_mult: int = 2
    """Transformer feed-forward width = ``ff_mult * d_model``."""
    dropout: float = 0.0


@dataclass
class DatasetConf:
    name: str = "digits"
    """``digits``, ``breast_cancer``, ``wine`` (bundled with scikit-learn) or ``synthetic``."""
    n_samples: int = 2048
    """synthetic only."""
    n_features: int = 64
    """synthetic only, when ``image_shape`` is empty."""
    n_classes: int = 10
    """synthetic only (the real datasets have their own)."""
    image_shape: list[int] = field(default_factory=list)
    """synthetic only: ``[C, H, W]`` makes image samples; empty makes flat vectors."""
    noise: float = 1.0
    """synthetic only: standard deviation of the noise around each class prototype."""
    generator_seed: int = 0
    """synthetic only: seeds the class prototypes and samples."""
    test_fraction: float = 0.25
    split_seed: int = 0
    """Seeds the stratified train/test split."""


@dataclass
class Level1Conf:
    batch_size: int = 32
    dtype: str = "float32"
    """``float32``, ``float64``, ``bfloat16`` or ``float16``."""
    impl: str = "eager"
    """``eager`` or ``compile`` (torch.compile)."""
    compile_mode: str = "default"
    """``mode`` passed to torch.compile when ``impl: compile``."""
    device: str = "cpu"
    layout: str = "contiguous"
    """``contiguous`` or ``channels_last`` (4-D inputs, i.e. the CNN)."""
    measure_memory: bool = True


@dataclass
class TrainConf:
    optimizer: str = "adam"
    """``sgd`` (with ``momentum``), ``adam`` or ``adamw``."""
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "constant"
    """``constant``, ``cosine`` (to 0 over all epochs) or ``step`` (x ``gamma`` every ``step_epochs``)."""
    step_epochs: int = 0
    """``step`` schedule period in epochs; 0 means max(1, epochs // 3)."""
    gamma: float = 0.1
    batch_size: int = 32
    eval_batch_size: int = 512
    epochs: int = 5
    deterministic: bool = True
    target_accuracy: Optional[float] = 0.9  # noqa: UP045 (OmegaConf needs typing.Optional)
    """Test accuracy whose first crossing gives ``time_to_target_s``; null disables it."""
    num_workers: int = 0
    device: str = "cpu"
    log_every: int = 1
    """Write every n-th step to ``steps.jsonl``."""


T = TypeVar("T")


def conf_from_dict(cls: type[T], section: str, data: Mapping[str, Any] | None) -> T:
    """``cls`` filled from ``data`` (defaults for missing keys); unknown keys are a D5PipeError."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    items = dict(data or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(items) - known)
    if unknown:
        raise D5PipeError(f"{section}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**items)
