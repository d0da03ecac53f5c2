"""``d5pipe cache [--clear]``: the prepared datasets shared by run directories (d5pipe.rundir.data_cache)."""

from __future__ import annotations

import argparse
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clear", action="store_true", help="remove every cached dataset")


def main(args: argparse.Namespace) -> int:
    from d5pipe.rundir.data_cache import cache_dir, clear, entries, limit_bytes

    if args.clear:
        print(f"removed {clear()} cached dataset(s) from {cache_dir()}")
        return 0
    rows = entries()
    total = sum(size for _key, size, _used in rows)
    limit = limit_bytes()
    print(f"{cache_dir()}: {len(rows)} dataset(s), {total / 2**20:.1f} MB of "
          f"{limit / 2**20:.0f} MB (D5PIPE_DATA_CACHE_MB{'; 0: off' if limit == 0 else ''})")
    for key, size, used in rows:
        print(f"  {key:40s} {size / 2**20:9.2f} MB  last used {time.strftime('%Y-%m-%d %H:%M', time.localtime(used))}")
    return 0
