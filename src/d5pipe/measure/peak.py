"""The machine's measured upper bounds: matmul FLOP/s per dtype and copy bandwidth.

Measured with the shared timer, once per (device, dtype) per shard process, cached in
``PointContext.cache``. The peak is the *best* observed block (work / fastest per-iteration time),
so that a point's "% of peak" reads against an upper bound; the median-based rate is kept too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from d5pipe.measure.timer import measure

PEAK_TIMER: dict[str, Any] = {
    "warmup_s": 0.2,
    "warmup_max_iters": 5,
    "min_block_s": 0.01,
    "target_ci_pct": 2.0,
    "budget_s": 1.5,
    "min_samples": 5,
    "max_samples": 200,
}
"""Timer settings of the peak measurements (short: they run once per shard process)."""

DEFAULT_MATMUL_SIZE = {"cpu": 1024, "cuda": 8192}
DEFAULT_COPY_MB = {"cpu": 128, "cuda": 2048}


@dataclass(frozen=True)
class Peak:
    """One measured peak rate."""

    best: float
    """work / fastest per-iteration time (units/s)."""
    median: float
    """work / median time (units/s)."""
    work: float
    what: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def _peak_timer(budget_s: float) -> dict[str, Any]:
    """:data:`PEAK_TIMER` with its budget capped by ``budget_s`` (a point's budget), >= 0.2 s."""
    return {**PEAK_TIMER, "budget_s": max(0.2, min(PEAK_TIMER["budget_s"], budget_s))}


def peak_flops(device: str, dtype: torch.dtype, size: int = 0, budget_s: float = 1.5) -> Peak:
    """FLOP/s of an ``n x n x n`` matmul in ``dtype`` (n = ``size`` or a per-device default)."""
    n = size or DEFAULT_MATMUL_SIZE[_kind(device)]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    m = measure(lambda: torch.matmul(a, b), _peak_timer(budget_s), device)
    work = 2.0 * n**3
    return Peak(work / m.summary.min, work / m.summary.median, work, f"matmul {n}^3 {dtype}")


def peak_bandwidth(device: str, megabytes: int = 0, budget_s: float = 1.5) -> Peak:
    """Bytes/s of copying a float32 buffer (read + write counted) of ``megabytes`` MiB."""
    mb = megabytes or DEFAULT_COPY_MB[_kind(device)]
    n = mb * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    m = measure(lambda: dst.copy_(src), _peak_timer(budget_s), device)
    work = 2.0 * n * 4
    return Peak(work / m.summary.min, work / m.summary.median, work, f"copy {mb} MiB float32")


def machine_peak(
    cache: dict[str, Any],
    device: str,
    dtype: torch.dtype,
    matmul_size: int = 0,
    copy_mb: int = 0,
    budget_s: float = 1.5,
) -> tuple[Peak | None, Peak]:
    """``(flops, bandwidth)`` peaks, measured on first use and cached in ``cache``.

    The FLOP peak is ``None`` when matmul does not run in ``dtype`` on this device. Each peak is
    timed within ``budget_s`` (capped at 1.5 s, at least 0.2 s).
    """
    bkey = f"machine_peak:bw:{device}:{copy_mb}"
    if bkey not in cache:
        cache[bkey] = peak_bandwidth(device, copy_mb, budget_s)
    return flops_peak(cache, device, dtype, matmul_size, budget_s), cache[bkey]


def flops_peak(
    cache: dict[str, Any], device: str, dtype: torch.dtype, matmul_size: int = 0, budget_s: float = 1.5
) -> Peak | None:
    """The matmul FLOP/s peak in ``dtype``, measured on first use and cached in ``cache``; None
    when matmul does not run in ``dtype`` on this device."""
    fkey = f"machine_peak:flops:{device}:{dtype}:{matmul_size}"
    if fkey not in cache:
        try:
            cache[fkey] = peak_flops(device, dtype, matmul_size, budget_s)
        except (RuntimeError, NotImplementedError):
            cache[fkey] = None
    peak: Peak | None = cache[fkey]
    return peak
