"""Schema of the ``operators`` section (level 0). Torch-free: ``d5pipe plan`` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from d5pipe.config.fields import at_least, choice

BUILTIN_OPERATORS: tuple[str, ...] = (
    "matmul", "bmm", "conv2d", "sdpa", "layer_norm", "softmax", "gelu", "sum",
)
"""Names of the built-in operators (d5pipe.levels.level0.operators defines them)."""
DTYPES: tuple[str, ...] = ("float64", "float32", "bfloat16", "float16")
IMPLS: tuple[str, ...] = ("eager", "compile", "channels_last")
LAYOUTS: tuple[str, ...] = ("contiguous", "channels_last", "transposed")


@dataclass
class OperatorsConf:
    op: str = "matmul"
    """Built-in (:data:`BUILTIN_OPERATORS`) or a key of ``custom``."""
    size: int = at_least(128, 1)
    """Operator-specific problem size (e.g. n for an n x n x n matmul; see d5pipe.levels.level0.operators)."""
    batch: int = at_least(1, 1)
    dtype: str = choice("float32", DTYPES)
    """Unsupported on the device -> point skipped."""
    impl: str = choice("eager", IMPLS)
    """eager, compile (torch.compile; compile time kept out of the timing, reported as compile_s),
    channels_last (eager with the channels_last layout; conv2d only)."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    layout: str = choice("contiguous", LAYOUTS)
    """contiguous, channels_last (conv2d), transposed (matmul/bmm: B stored column-major)."""
    check_correctness: bool = True
    check_backward: bool = True
    peak: bool = True
    """Measure the machine's peak FLOP/s and bandwidth once per shard process and report % of peak."""
    peak_matmul_size: int = at_least(0, 0)
    """n of the n^3 matmul measuring peak FLOP/s (0: 1024 on CPU, 8192 on CUDA)."""
    peak_copy_mb: int = at_least(0, 0)
    """MiB copied to measure peak bandwidth (0: 128 on CPU, 2048 on CUDA)."""
    allowed_prefixes: list[str] = field(default_factory=lambda: ["d5pipe."])
    custom: dict[str, str] = field(default_factory=dict)
    """User operators: name -> import path ``module:attr`` (only under ``allowed_prefixes``)."""
    extra: dict[str, Any] = field(default_factory=dict)
