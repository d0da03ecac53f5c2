"""``d5pipe compare A B``: what the two runs differ in (config, environment, code, machine), then
the configurations they share, each timing changed, equivalent or inconclusive, the other metrics
identical or not. Where either side is MLPerf-format logs (a published MLPerf result), the two
sides' MLPerf results instead, time to train decided over their runs (d5pipe.results.mlperf_result).

The output ends with one line counting the verdicts. Exit codes: 0, :data:`REGRESSION_EXIT` (4)
a timing ``changed`` for the worse by more than ``--fail-on-regression`` percent,
:data:`INCONCLUSIVE_EXIT` (5) with ``--fail-on-inconclusive`` and a timing left undecided, 2 a
user error.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from d5pipe.cli.arguments import fraction, percent, percent_or_zero
from d5pipe.core.atomic import write_json
from d5pipe.provenance.bundle import opened_bundle
from d5pipe.provenance.run_diff import run_differences
from d5pipe.results.compare import RunComparison, compare_runs, regressions, to_json
from d5pipe.results.compare_table import format_table, summary_line
from d5pipe.results.metric_compare import ComparePolicy
from d5pipe.results.mlperf_result import compare_results, is_mllog
from d5pipe.results.profile_changes import explain_comparison
from d5pipe.results.timing_compare import DEFAULT_ALPHA, DEFAULT_CORRECTION, DEFAULT_MARGIN, DEFAULT_RUN_NOISE, Policy

REGRESSION_EXIT = 4
"""A timing changed for the worse beyond ``--fail-on-regression``."""
INCONCLUSIVE_EXIT = 5
"""``--fail-on-inconclusive``: a timing could be shown neither changed nor equivalent."""


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``compare``, ``reproduce`` and ``ab``: how timings and numbers are judged."""
    parser.add_argument("--alpha", type=fraction, default=DEFAULT_ALPHA,
                        help=f"level of the test for a change, over all timings together (default {DEFAULT_ALPHA})")
    parser.add_argument("--margin", type=percent, default=100 * DEFAULT_MARGIN, metavar="PCT",
                        help="equivalence margin: a timing whose whole 95%% CI lies within a factor 1+PCT/100 "
                             f"either way is equivalent (default {100 * DEFAULT_MARGIN:g})")
    parser.add_argument("--correction", choices=["holm", "bh", "none"], default=DEFAULT_CORRECTION,
                        help="multiple-comparison correction over the timings compared together "
                             f"(default {DEFAULT_CORRECTION})")
    parser.add_argument("--run-noise", type=percent_or_zero, default=100 * DEFAULT_RUN_NOISE, metavar="PCT",
                        help="how much a whole run shifts on this machine (sd, percent): the variance two runs "
                             "measured apart add to their comparison; not used by interleaved rounds "
                             f"(default {100 * DEFAULT_RUN_NOISE:g})")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance for numerical metrics")
    parser.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance for numerical metrics")
    parser.add_argument("--fail-on-inconclusive", action="store_true",
                        help="fail when a timing is neither shown changed nor equivalent")


def policy_from_args(args: argparse.Namespace) -> ComparePolicy:
    return ComparePolicy(rtol=args.rtol, atol=args.atol)


def timing_policy_from_args(args: argparse.Namespace) -> Policy:
    return Policy(alpha=args.alpha, margin=args.margin / 100.0, correction=args.correction,
                  run_noise=args.run_noise / 100.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="reference run directory or bundle archive, or MLPerf-format logs "
                        "(a file, or a directory of one result's logs)")
    parser.add_argument("b", type=Path, help="candidate run directory or bundle archive, or MLPerf-format logs")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help=f"exit {REGRESSION_EXIT} when a timing changed for the worse by more than PCT percent")
    parser.add_argument("--allow-different", action="store_true",
                        help="compare runs of two different experiments (they share no point IDs)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the comparison as JSON")
    add_policy_arguments(parser)


def verdict_exit(result: RunComparison, args: argparse.Namespace) -> int:
    """Print the gate lines (regressions, undecided timings) to stderr; the exit code."""
    found = regressions(result, args.fail_on_regression) if args.fail_on_regression is not None else []
    for point, t in found:
        print(f"regression: {point.stage}/{point.point_id} {t.metric}: {t.text()}", file=sys.stderr)
    if found:
        return REGRESSION_EXIT
    if args.fail_on_inconclusive and result.counts()["inconclusive"]:
        print(f"inconclusive: {result.counts()['inconclusive']} timing(s) undecided (--fail-on-inconclusive)",
              file=sys.stderr)
        return INCONCLUSIVE_EXIT
    return 0


def _mlperf(args: argparse.Namespace) -> int:
    """MLPerf-format logs on a side: both sides' results, each time to train decided; the same gates."""
    with contextlib.ExitStack() as stack:
        a, b = (p if is_mllog(p) else stack.enter_context(opened_bundle(p)) for p in (args.a, args.b))
        result = compare_results(a, b, timing_policy_from_args(args))
    print("\n".join(result.lines))
    if args.json is not None:
        write_json(args.json, result.to_json())
    worse = [(x, y, t) for x, y, t in result.timings if args.fail_on_regression is not None
             and t.verdict == "changed" and (t.slowdown or 0.0) > args.fail_on_regression / 100.0]
    for x, y, t in worse:
        print(f"regression: time to train, {y} against {x}: {t.text()}", file=sys.stderr)
    if worse:
        return REGRESSION_EXIT
    if args.fail_on_inconclusive and any(t.verdict == "inconclusive" for _, _, t in result.timings):
        print("inconclusive: a time to train undecided (--fail-on-inconclusive)", file=sys.stderr)
        return INCONCLUSIVE_EXIT
    return 0


def main(args: argparse.Namespace) -> int:
    if is_mllog(args.a) or is_mllog(args.b):  # a published MLPerf result on either side
        return _mlperf(args)
    with opened_bundle(args.a) as dir_a, opened_bundle(args.b) as dir_b:
        differs = run_differences(dir_a, dir_b)
        result = compare_runs(dir_a, dir_b, policy_from_args(args), args.allow_different,
                              labels=(str(args.a), str(args.b)), timing=timing_policy_from_args(args))
        explain_comparison(result, dir_a, dir_b)
    print("\n".join(differs.lines()))
    print(format_table(result).rsplit("\n", 1)[0])
    if args.json is not None:
        write_json(args.json, {**to_json(result), "differences": differs.to_json()})
    if not result.paired:
        print("note: A and B were measured at different times; a drift of the machine between them reads as a "
              "change. `d5pipe ab A B` measures both sides interleaved.")
    code = verdict_exit(result, args)
    print(f"compare: {summary_line(result)}")
    return code
