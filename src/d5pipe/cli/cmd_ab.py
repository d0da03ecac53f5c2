"""``d5pipe ab A B --out DIR``: re-run two sides interleaved in time and compare them, paired; the
output opens with what the two re-runs (OUT/a, OUT/b) differ in (d5pipe.provenance.run_diff).

A and B are run directories or bundle archives (``d5pipe run ... --dry-run --out A`` makes one
without measuring). By default the comparison is carried on until decided (``--no-until-decided``:
the given repetitions only). See d5pipe.execute.ab for how the sides take turns. Exit codes as ``d5pipe
compare``: 0, 4 a regression beyond ``--fail-on-regression``, 5 with ``--fail-on-inconclusive`` and
a timing left undecided, 2 a user error; 3 when a side's points failed their checks.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from d5pipe.cli.arguments import add_allow_argument, add_until_decided_arguments, apply_allow, key_values, positive_int
from d5pipe.cli.cmd_compare import (
    REGRESSION_EXIT,
    add_policy_arguments,
    policy_from_args,
    timing_policy_from_args,
    verdict_exit,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="side A (the reference): a run directory or bundle archive")
    parser.add_argument("b", type=Path, help="side B (the candidate): a run directory or bundle archive")
    parser.add_argument("-o", "--out", type=Path, required=True,
                        help="where both sides' runs go (OUT/a, OUT/b) with ab.json; an earlier ab output resumes")
    parser.add_argument("--repetitions", type=positive_int, default=None,
                        help="repetitions (rounds) of each side (default: each side's config)")
    parser.add_argument("--seed", type=int, default=0, help="draws which side starts each pair of shards")
    parser.add_argument("--no-interleave", action="store_true",
                        help="run the sides at the same time without taking turns (for comparison only)")
    add_until_decided_arguments(parser, on=True)
    for side in ("A", "B"):
        parser.add_argument(f"--env-{side.lower()}", action="append", default=[], metavar="NAME=VALUE",
                            help=f"an environment variable for side {side}'s jobs only (repeatable)")
    for side in ("A", "B"):
        parser.add_argument(f"--python-{side.lower()}", default=None,
                            help=f"the Python interpreter (environment) of side {side}")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help=f"exit {REGRESSION_EXIT} when a timing changed for the worse by more than PCT percent")
    add_policy_arguments(parser)
    add_allow_argument(parser)


def main(args: argparse.Namespace) -> int:
    import sys

    from d5pipe.core.errors import D5PipeError
    from d5pipe.execute.ab import SIDES, SideSpec, run_ab
    from d5pipe.provenance.bundle import opened_bundle
    from d5pipe.provenance.run_diff import run_differences
    from d5pipe.results.compare_table import format_table, summary_line

    apply_allow(args.allow)
    envs = {s: key_values(getattr(args, f"env_{s}"), f"--env-{s}", "NAME=VALUE", str.isidentifier) for s in SIDES}
    pythons = {s: getattr(args, f"python_{s}") or sys.executable for s in SIDES}
    for side, exe in pythons.items():
        if not Path(exe).is_file():
            raise D5PipeError(f"--python-{side} {exe}: not a file")
    with contextlib.ExitStack() as stack:
        specs = {s: SideSpec(Path(stack.enter_context(opened_bundle(getattr(args, s)))), envs[s], pythons[s])
                 for s in SIDES}
        result = run_ab(specs, args.out, args.repetitions, timing_policy_from_args(args), policy_from_args(args),
                        seed=args.seed, interleave=not args.no_interleave, until_decided=args.until_decided,
                        budget_s=args.budget, max_repetitions=args.max_repetitions)
    print("\n".join(run_differences(args.out / "a", args.out / "b").lines()))
    print(format_table(result.comparison).rsplit("\n", 1)[0])
    if args.until_decided:
        left = result.rounds[-1]["undecided"]
        print(f"until decided: {len(result.rounds)} round(s), {result.seconds:.0f} s; "
              + (f"{len(left)} timing(s) still undecided: {', '.join(left[:5])}" if left else "every timing decided"))
    code = verdict_exit(result.comparison, args)
    how = "interleaved, paired" if result.comparison.paired else (
        "interleaved, unpaired (the sides' shards differ)" if result.lockstep else "not interleaved")
    if result.alone:
        how += f"; {result.alone} point(s) met no partner and were measured alone"
    print(f"ab ({how}, {result.seconds:.0f} s): {summary_line(result.comparison)}; {args.out / 'ab.json'}")
    return 3 if code == 0 and 3 in result.exit_codes.values() else code
