"""``d5pipe plan EXPERIMENT [overrides...] [--json]``: what would run, without running it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from d5pipe.execute.run import default_out, load_plan
from d5pipe.execute.summary import format_summary, summarize


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--out", type=Path, help="run directory to check for finished points")
    p.add_argument("--executor", choices=["local", "slurm"])
    p.add_argument("--config-dir", action="append", default=[])
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    plan = load_plan(args.experiment, args.overrides, args.config_dir, args.executor)
    run_dir = args.out or default_out(plan)
    summary = summarize(plan, run_dir, time.perf_counter() - t0)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        print(format_summary(summary))
    return 0
