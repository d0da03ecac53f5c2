"""Schema of the ``operators`` section (level 0)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class OperatorsConf:
    op: str = "matmul"
    """Built-in: matmul, bmm, conv2d, sdpa, layer_norm, softmax, gelu, sum; or a key of ``custom``."""
    size: int = 128
    """Operator-specific problem size (e.g. n for an n x n x n matmul; see d5pipe.level0.operators)."""
    batch: int = 1
    dtype: str = "float32"
    """float32, bfloat16, float16 (float64 too); unsupported on the device -> point skipped."""
    impl: str = "eager"
    """eager, compile (torch.compile; compile time kept out of the timing, reported as compile_s),
    channels_last (eager with the channels_last layout; conv2d only)."""
    device: str = "cpu"
    layout: str = "contiguous"
    """contiguous, channels_last (conv2d), transposed (matmul/bmm: B stored column-major)."""
    check_correctness: bool = True
    check_backward: bool = True
    peak: bool = True
    """Measure the machine's peak FLOP/s and bandwidth once per shard process and report % of peak."""
    peak_matmul_size: int = 0
    """n of the n^3 matmul measuring peak FLOP/s (0: 1024 on CPU, 8192 on CUDA)."""
    peak_copy_mb: int = 0
    """MiB copied to measure peak bandwidth (0: 128 on CPU, 2048 on CUDA)."""
    allowed_prefixes: list[str] = field(default_factory=lambda: ["d5pipe."])
    custom: dict[str, str] = field(default_factory=dict)
    """User operators: name -> import path ``module:attr`` (only under ``allowed_prefixes``)."""
    extra: dict[str, Any] = field(default_factory=dict)
