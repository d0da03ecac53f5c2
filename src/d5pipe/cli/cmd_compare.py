"""``d5pipe compare A B``: shared points side by side, each metric's change with significance.

The output ends with one line, the verdict. Exit codes: 0 no regression (or no
``--fail-on-regression``), :data:`REGRESSION_EXIT` (4) a significant slowdown beyond the threshold,
2 a user error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from d5pipe.core.atomic import write_json
from d5pipe.provenance.bundle import opened_bundle
from d5pipe.results.compare import RunComparison, compare_runs, format_table, regressions, to_json
from d5pipe.results.metric_compare import ComparePolicy

REGRESSION_EXIT = 4
"""``d5pipe compare --fail-on-regression``: a significant slowdown beyond the threshold."""


def verdict_line(result: RunComparison, pct: float | None) -> str:
    """The last line of ``d5pipe compare``: regressions, or how many timings were (not) compared."""
    timings = [c for p in result.points for c in p.comparisons if c.kind == "timing"]
    tested = [c for c in timings if c.verdict != "not_compared"]
    changed = [c for c in tested if c.verdict == "changed"]
    untested = len(timings) - len(tested)
    counts = (f"{len(tested)} timing(s) compared across repetitions, {len(changed)} changed significantly"
              + (f", {untested} not compared (one process per side or too few repetitions)" if untested else ""))
    if pct is None:
        return f"compare: {counts}"
    found = regressions(result, pct)
    if not found:
        return f"compare: no regression worse than {pct:g}% ({counts})"
    worst = ", ".join(f"{p.stage}/{p.point_id} {c.metric} {c.rel_change:+.1%}" for p, c in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"compare: {len(found)} regression(s) worse than {pct:g}%: {worst}{more} ({counts})"


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
                        help=f"exit {REGRESSION_EXIT} when a significant timing slowdown exceeds PCT percent")
    parser.add_argument("--allow-different", action="store_true",
                        help="compare runs of two different experiments (they share no point IDs)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the comparison as JSON")
    add_policy_arguments(parser)


def main(args: argparse.Namespace) -> int:
    with opened_bundle(args.a) as dir_a, opened_bundle(args.b) as dir_b:
        result = compare_runs(dir_a, dir_b, policy_from_args(args), args.allow_different,
                              labels=(str(args.a), str(args.b)))
    print(format_table(result))
    if args.json is not None:
        write_json(args.json, to_json(result))
    found = regressions(result, args.fail_on_regression) if args.fail_on_regression is not None else []
    for point, c in found:
        print(f"regression: {point.stage}/{point.point_id} {c.metric}: {c.detail}", file=sys.stderr)
    print(verdict_line(result, args.fail_on_regression))
    return REGRESSION_EXIT if found else 0
