"""The machine's ceilings, measured as ceilings (an empirical roofline), once per machine.

"% of peak" must be a percentage of something that bounds. One large matmul and one large copy do
not: a float16 matmul takes a slow path on many CPUs while other float16 kernels compute in float32,
small matmuls run faster than a 1024^3 one, and data in cache move faster than a main-memory copy.
So, as the Empirical Roofline Toolkit does:

* **FLOP ceiling of a dtype**: the best rate (work / fastest block) of the ``m x k x n`` matmuls
  of :data:`FLOP_SHAPES` and of channels-last 3x3 convolutions (:data:`CONV_SHAPES`: oneDNN's
  convolutions outrun its matmuls on some CPUs, and a ceiling must bound every kernel a point may
  use); shapes stop growing once one call takes longer than :data:`SLOW_CALL_S` (float16 on a CPU
  without float16 arithmetic). Every kernel is timed in :data:`ROUNDS` short windows, interleaved
  with the others', and keeps its fastest call: on a shared machine (a VM, a busy node) speed
  changes from one tenth of a second to the next, and a ceiling must hold in the fast moments too. A dtype narrower than float32 is bounded by the
  float32 ceiling too when that is higher: its kernels may compute in float32 (the record says
  which rate set the ceiling, ``via``).
* **Bandwidth by working set**: a copy (read + write) and a read-only reduction of buffers from
  16 KiB to 256 MiB (:data:`SWEEP_KIB`), the best of both per size. A point whose compulsory traffic
  (its working set) is ``W`` bytes is bounded by the best rate measured at working sets of ``W / 4``
  and up: the plateau of the cache level that holds it, with margin at the level's edges. The
  levels (L1d, L2, L3 sizes from sysfs, then DRAM) name where ``W`` fits.
* **Roofline bound of a point**: ``min(FLOP ceiling, intensity x bandwidth bound)``
  (:func:`roofline`); a point without FLOPs is bounded by the bandwidth alone.

A point close to its FLOP ceiling (:data:`REFRESH_NEAR`) has that dtype's fastest kernels timed
again right then (:data:`REFRESH_TOP` of them, a few tenths of a second), and the higher rates are
kept: the ceiling holds in the machine's present speed too, and the record says it was refreshed.

Measured once per (machine, torch version, device, intra-op threads) and kept in the user cache
(``ceilings/<key>.json``, d5pipe.core.user_dirs.user_cache_dir) under a file lock, so concurrent shard processes
neither measure twice nor measure while another one does; every later process reads the file.
Each dtype is measured when first needed. The measurement (with its seconds) is part of the record
of every point that uses it. ``d5pipe peaks`` prints the table.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from d5pipe.core.atomic import read_json, write_text
from d5pipe.measure.timer import measure

CEILINGS_VERSION = 4
"""Bump when the measurement changes (a new cache key)."""
FLOP_SHAPES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "cpu": ((256, 256, 256), (512, 512, 512), (1024, 256, 256), (1024, 1024, 1024)),
    "cuda": ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096))}
"""(m, k, n) of the matmuls: square ones, and tall ones (a batch of rows times a square matrix,
as networks and batched operators run them)."""
SWEEP_KIB: dict[str, tuple[int, ...]] = {
    "cpu": (16, 64, 256, 1024, 4096, 16384, 65536, 262144),
    "cuda": (1024, 16384, 262144, 1048576, 4194304),
}
CONV_SHAPES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "cpu": ((1, 16, 128), (1, 64, 56), (1, 128, 28)), "cuda": ((32, 64, 56), (32, 256, 14))}
"""(batch, channels, image size) of the 3x3 convolutions (channels in = out, padding 1)."""
ROUNDS = 5
REFRESH_TOP = 2
"""A refresh re-times this many of a dtype's fastest kernels."""
REFRESH_NEAR = 0.97
"""A point whose rate (upper CI end) reaches this fraction of its FLOP ceiling refreshes it."""
SLOW_CALL_S = 0.1
"""A matmul shape whose single call takes longer than this ends the shape sweep of its dtype."""
WORKING_SET_MARGIN = 4
"""A working set ``W`` is bounded by the best bandwidth measured at ``W / 4`` bytes and up."""
TIMER: dict[str, Any] = {"warmup_s": 0.005, "warmup_max_iters": 2, "min_block_s": 1e-4, "target_ci_pct": 0.1,
                         "budget_s": 0.03, "min_samples": 3, "max_samples": 1000}
"""Short windows of near single calls: the fastest call is what a ceiling needs, not a tight CI
of the median (a point's rate is its median: the fastest call bounds it)."""
NARROW = (torch.float16, torch.bfloat16)


def _kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def machine_key(device: str, threads: int) -> str:
    """What the ceilings depend on: machine, CPU model, torch, device, threads, this code's version."""
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(device) if _kind(device) == "cuda" else ""
    ident = json.dumps([platform.node(), cpu, os.cpu_count(), torch.__version__, device, gpu, threads,
                        CEILINGS_VERSION])
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def memory_levels() -> list[tuple[str, int]]:
    """(name, bytes) of the data caches from sysfs (L1d, L2, L3), smallest first."""
    out: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")) if base.is_dir() else ():
        try:
            kind = (d / "type").read_text().strip()
            level = (d / "level").read_text().strip()
            size = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        if kind == "Instruction" or not size:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        out[f"L{level}"] = int(size.rstrip("KMG")) * mult
    return sorted(out.items(), key=lambda kv: kv[1])


def level_of(working_set: float, levels: list[tuple[str, int]]) -> str:
    """The smallest cache level that holds ``working_set`` bytes, else DRAM."""
    return next((name for name, size in levels if working_set <= size), "DRAM")


def _best(fn: Any, device: str) -> float:
    """Fastest per-call seconds of ``fn`` in one short window (d5pipe.measure.timer)."""
    return float(measure(fn, TIMER, device).summary.min)


def _sync(device: str) -> None:
    if _kind(device) == "cuda":
        torch.cuda.synchronize(device)


def _kernels(device: str, dtype: torch.dtype, gen: torch.Generator) -> Iterator[tuple[str, float, Any]]:
    """(name, FLOPs per call, call) of every FLOP-ceiling kernel, in growing work per family."""
    for m, k, n in FLOP_SHAPES[_kind(device)]:
        a = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)
        b = torch.randn(k, n, generator=gen).to(device=device, dtype=dtype)
        yield f"matmul {m}x{k}x{n}", 2.0 * m * k * n, lambda a=a, b=b: torch.matmul(a, b)
    for batch, c, n in CONV_SHAPES[_kind(device)]:
        x = torch.randn(batch, c, n, n, generator=gen).to(device=device, dtype=dtype,
                                                           memory_format=torch.channels_last)
        w = torch.randn(c, c, 3, 3, generator=gen).to(device=device, dtype=dtype, memory_format=torch.channels_last)
        yield (f"conv2d b={batch} c={c} n={n}", 2.0 * batch * c * c * 9 * n * n,
               lambda x=x, w=w: torch.nn.functional.conv2d(x, w, padding=1))


def measure_flops(device: str, dtype: torch.dtype, only: frozenset[str] | None = None) -> dict[str, Any]:
    """Best rate in ``dtype`` over the matmul and convolution kernels (see the module docstring);
    ``only``: those kernels alone (a refresh)."""
    gen = torch.Generator().manual_seed(0)
    usable: list[tuple[str, float, Any]] = []
    slow: set[str] = set()
    for name, flops, fn in _kernels(device, dtype, gen):
        family = name.split()[0]
        if family in slow or (only is not None and name not in only):
            continue
        try:
            t0 = time.perf_counter()
            fn()
            _sync(device)
            first = time.perf_counter() - t0
        except (RuntimeError, NotImplementedError):
            slow.add(family)
            continue
        if first > SLOW_CALL_S:  # the rest of this family is larger still
            slow.add(family)
            if any(k.startswith(family) for k, _, _ in usable):
                continue
        usable.append((name, flops, fn))
    rates: dict[str, float] = {}
    for _ in range(ROUNDS):
        for name, flops, fn in usable:
            rates[name] = max(rates.get(name, 0.0), flops / _best(fn, device))
    return _flops_entry(rates)


def _flops_entry(rates: dict[str, float]) -> dict[str, Any]:
    """A dtype's FLOP record: its best rate, the kernel that set it, and every kernel's rate."""
    best = max(rates, key=lambda k: rates[k]) if rates else ""
    return {"best": rates.get(best, 0.0), "shape": best, "rates": rates}


def measure_bandwidth(device: str) -> dict[str, Any]:
    """Best of copy and read-only reduction per working set (bytes moved / fastest call)."""
    rates: dict[str, float] = {}
    for kib in SWEEP_KIB[_kind(device)]:
        n = kib * 1024 // 4
        src = torch.ones(n, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        copy = 2.0 * n * 4 / _best(lambda src=src, dst=dst: dst.copy_(src), device)
        read = 1.0 * n * 4 / _best(lambda src=src: src.sum(), device)
        rates[str(kib * 1024)] = max(copy, read)
        del src, dst
    return {"rates": rates, "levels": memory_levels()}


@dataclass
class Ceilings:
    """The measured ceilings of one machine, device and thread count (see the module docstring)."""

    key: str
    device: str
    threads: int
    flops: dict[str, dict[str, Any]]
    """dtype name -> {best, shape (the kernel that set it), rates (per kernel)} of its own kernels."""
    bandwidth: dict[str, Any]
    """{rates: {working-set bytes: bytes/s}, levels: [[name, bytes], ...]}."""
    seconds: dict[str, float]
    """What measuring each part took (s)."""

    def flop_ceiling(self, dtype: torch.dtype) -> tuple[float, str]:
        """(FLOP/s, what set it): the dtype's own best kernel, or float32's when that is higher
        for a dtype narrower than float32."""
        own = float(self.flops.get(str(dtype), {}).get("best", 0.0))
        via = f"{str(dtype).removeprefix('torch.')} {self.flops.get(str(dtype), {}).get('shape', '?')}"
        if dtype in NARROW:
            f32 = self.flops.get(str(torch.float32), {})
            if float(f32.get("best", 0.0)) > own:
                return float(f32["best"]), f"float32 {f32.get('shape', '?')} (bounds {via})"
        return own, via

    def bandwidth_bound(self, working_set: float) -> tuple[float, str]:
        """(bytes/s, memory level) for a point moving ``working_set`` bytes."""
        rates = {int(k): float(v) for k, v in self.bandwidth["rates"].items()}
        if not rates:
            return 0.0, "DRAM"
        floor = working_set / WORKING_SET_MARGIN
        eligible = [r for size, r in rates.items() if size >= floor] or [rates[max(rates)]]
        levels = [(str(n), int(b)) for n, b in self.bandwidth.get("levels", [])]
        return max(eligible), level_of(working_set, levels)

    def table(self) -> list[tuple[str, str, str]]:
        """(ceiling, value, how) rows: FLOP/s per measured dtype, bandwidth per level."""
        f32 = float(self.flops.get(str(torch.float32), {}).get("best", 0.0))
        rows = [(f"FLOP/s {name.removeprefix('torch.')}", f"{v['best'] / 1e9:.1f} GFLOP/s",
                 f"best of {len(v['rates'])} matmul / conv2d kernels, at {v['shape']}"
                 + (f"; its points are bounded by float32's {f32 / 1e9:.1f} GFLOP/s"
                    if name in (str(torch.float16), str(torch.bfloat16)) and f32 > float(v["best"]) else ""))
                for name, v in sorted(self.flops.items())]
        rates = {int(k): float(v) for k, v in self.bandwidth["rates"].items()}
        levels = [(str(n), int(b)) for n, b in self.bandwidth.get("levels", [])]
        for name in [*(n for n, _ in levels), "DRAM"]:
            sizes = [s for s in rates if level_of(s, levels) == name]
            if sizes:
                best = max(sizes, key=lambda s: rates[s])
                rows.append((f"bandwidth {name}", f"{rates[best] / 1e9:.1f} GB/s",
                             f"best of copy / read over working sets {_kib(min(sizes))}-{_kib(max(sizes))}"))
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "device": self.device, "threads": self.threads, "flops": self.flops,
                "bandwidth": self.bandwidth, "seconds": self.seconds, "version": CEILINGS_VERSION}


def _kib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


@dataclass(frozen=True)
class Bound:
    """A point's roofline bound."""

    gflops: float
    """min(FLOP ceiling, intensity x bandwidth bound) in GFLOP/s (0 for a point without FLOPs)."""
    gbps: float
    """The bandwidth bound of the point's working set (GB/s)."""
    level: str
    limited_by: str
    """``compute`` or ``bandwidth``."""
    flop_ceiling_gflops: float
    via: str


def roofline(ceilings: Ceilings, dtype: torch.dtype, flops: float, working_set: float) -> Bound:
    """The attainable rate of a point doing ``flops`` on ``working_set`` compulsory bytes."""
    f_ceiling, via = ceilings.flop_ceiling(dtype)
    bw, level = ceilings.bandwidth_bound(working_set)
    if flops <= 0 or working_set <= 0:
        return Bound(0.0, bw / 1e9, level, "bandwidth", f_ceiling / 1e9, via)
    by_bw = flops / working_set * bw
    limited = "compute" if f_ceiling <= by_bw else "bandwidth"
    return Bound(min(f_ceiling, by_bw) / 1e9, bw / 1e9, level, limited, f_ceiling / 1e9, via)


def cache_path(key: str) -> Path:
    from d5pipe.core.user_dirs import user_cache_dir

    return user_cache_dir() / "ceilings" / f"{key}.json"


def _merge_max(old: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    return {k: max(float(old.get(k, 0.0)), float(new.get(k, 0.0))) for k in {*old, *new}}


def machine_ceilings(device: str, dtypes: tuple[torch.dtype, ...], threads: int | None = None,
                     memo: dict[str, Any] | None = None, remeasure: bool = False,
                     refresh: tuple[torch.dtype, ...] = ()) -> Ceilings:
    """The ceilings for ``device`` at ``threads`` (default: torch's), with every dtype of ``dtypes``
    (and float32) measured: read from the user cache, measured under its lock where missing.
    ``memo``: a per-process dict (``PointContext.cache``) that saves even the file read.
    ``remeasure``: measure everything again and keep, per rate, the higher of the two (a ceiling
    measured on a busy machine is too low; a second measurement can only raise it).
    ``refresh``: time the :data:`REFRESH_TOP` fastest kernels of these dtypes again now, keeping
    the higher rates (a point close to its ceiling checks it in the machine's present speed)."""
    from filelock import FileLock

    threads = int(threads or torch.get_num_threads())
    key = machine_key(device, threads)
    wanted = {str(d) for d in (torch.float32, *dtypes)}
    mkey = f"ceilings:{key}"
    if memo is not None and mkey in memo and wanted <= set(memo[mkey].flops) and not remeasure and not refresh:
        return memo[mkey]
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=600):
        data: dict[str, Any] = read_json(path, {})
        if data.get("version") != CEILINGS_VERSION:
            data = {}
        ceil = Ceilings(key, device, threads, dict(data.get("flops") or {}), dict(data.get("bandwidth") or {}),
                        dict(data.get("seconds") or {}))
        changed = False
        prev = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            if remeasure or not ceil.bandwidth.get("rates"):
                t0 = time.perf_counter()
                fresh = measure_bandwidth(device)
                fresh["rates"] = _merge_max(ceil.bandwidth.get("rates") or {}, fresh["rates"])
                ceil.bandwidth = fresh
                ceil.seconds["bandwidth"] = time.perf_counter() - t0
                changed = True
            for d in dict.fromkeys((torch.float32, *dtypes, *refresh)):
                known = (ceil.flops.get(str(d)) or {}).get("rates") or {}
                if remeasure or not known or d in refresh:
                    only = frozenset(sorted(known, key=lambda k: float(known[k]), reverse=True)[:REFRESH_TOP]) \
                        if d in refresh and known and not remeasure else None
                    t0 = time.perf_counter()
                    fresh = measure_flops(device, d, only)
                    ceil.flops[str(d)] = _flops_entry(_merge_max(known, fresh["rates"]))
                    what = f"flops {str(d).removeprefix('torch.')}" + (" refresh" if only else "")
                    ceil.seconds[what] = ceil.seconds.get(what, 0.0) * bool(only) + time.perf_counter() - t0
                    changed = True
        finally:
            torch.set_num_threads(prev)
        if changed:  # atomically: a reader never sees half a file (the lock is for writers)
            write_text(path, json.dumps(ceil.to_json(), indent=1, sort_keys=True) + "\n", durable=False)
    if memo is not None:
        memo[mkey] = ceil
    return ceil
