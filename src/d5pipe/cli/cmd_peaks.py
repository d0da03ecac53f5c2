"""``d5pipe peaks [--threads N] [--dtype D ...] [--remeasure]``: the machine's ceilings (FLOP/s per
dtype, bandwidth per memory level) that every "% of peak" and roofline bound is against
(d5pipe.measure.ceilings): read from the user cache, measured (and cached) where missing."""

from __future__ import annotations

import argparse
import time

DTYPES = ("float32", "float64", "bfloat16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads, as a shard job runs with (executor cpus_per_task; default 1)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="dtypes to show (default: all four)")
    p.add_argument("--remeasure", action="store_true",
                   help="measure again and keep the higher of each rate (a busy machine measures too low)")


def main(args: argparse.Namespace) -> int:
    import torch

    from d5pipe.core.errors import D5PipeError
    from d5pipe.levels.device import require_device
    from d5pipe.measure.ceilings import cache_path, machine_ceilings, machine_key

    if args.threads < 1:
        raise D5PipeError(f"--threads: {args.threads} must be >= 1")
    device = str(require_device(args.device, "--device"))
    dtypes = tuple(getattr(torch, d) for d in (args.dtype or DTYPES))
    t0 = time.perf_counter()
    ceilings = machine_ceilings(device, dtypes, threads=args.threads, remeasure=args.remeasure)
    took = time.perf_counter() - t0
    print(f"ceilings of {device}, {args.threads} thread(s): {cache_path(machine_key(device, args.threads))}")
    width = max(len(r[0]) for r in ceilings.table())
    for name, value, how in ceilings.table():
        print(f"  {name:<{width}}  {value:>14}  {how}")
    measured = sum(ceilings.seconds.values())
    print(f"measuring them took {measured:.1f} s once ({', '.join(f'{k} {v:.1f} s' for k, v in ceilings.seconds.items())}); "
          f"this command took {took:.1f} s")
    return 0
