"""``d5pipe compare A B``: shared points side by side, each metric's change with significance."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from d5pipe.results.compare import compare_runs, format_table, regressions, to_json
from d5pipe.results.metric_compare import ComparePolicy
from d5pipe.rundir.atomic import write_json


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``reproduce``: significance level and numerical tolerances."""
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the Mann-Whitney U test")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance for numerical metrics")
    parser.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance for numerical metrics")
    parser.add_argument("--min-change", type=float, default=0.0, metavar="PCT",
                        help="ignore significant timing changes smaller than PCT percent")


def policy_from_args(args: argparse.Namespace) -> ComparePolicy:
    return ComparePolicy(alpha=args.alpha, rtol=args.rtol, atol=args.atol, min_rel_change=args.min_change / 100.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="reference run directory or bundle archive")
    parser.add_argument("b", type=Path, help="candidate run directory or bundle archive")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help="exit 1 when a significant timing slowdown exceeds PCT percent")
    parser.add_argument("--allow-different", action="store_true",
                        help="compare runs of two different experiments (they share no point IDs)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the comparison as JSON")
    add_policy_arguments(parser)


def main(args: argparse.Namespace) -> int:
    result = compare_runs(args.a, args.b, policy_from_args(args), args.allow_different)
    print(format_table(result))
    if args.json is not None:
        write_json(args.json, to_json(result))
    if args.fail_on_regression is not None:
        found = regressions(result, args.fail_on_regression)
        for point, c in found:
            print(f"regression: {point.stage}/{point.point_id} {c.metric}: {c.detail}", file=sys.stderr)
        if found:
            return 1
    return 0
