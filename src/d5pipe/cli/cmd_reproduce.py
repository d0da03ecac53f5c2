"""``d5pipe reproduce BUNDLE``: verify, re-run and compare a published run (exit 0 reproduced, 3 not).

The function that re-runs a config is ``args.rerun`` when the CLI main injected one
(``parser.set_defaults(rerun=...)``), else ``d5pipe.runner.run_config_file(config_yaml, out_dir)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import cast

from d5pipe.cli.cmd_compare import add_policy_arguments, policy_from_args
from d5pipe.errors import D5PipeError
from d5pipe.reproduce import RerunFn, reproduce


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="bundle directory or .tar.gz archive")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="where the re-run goes (absent or empty; default BUNDLE-reproduce)")
    parser.add_argument("--strict-env", action="store_true",
                        help="refuse (exit 2) when this environment's env_hash differs from the bundle's")
    add_policy_arguments(parser)


def _default_rerun() -> RerunFn:
    runner = importlib.import_module("d5pipe.runner")
    fn = getattr(runner, "run_config_file", None)
    if fn is None:
        raise D5PipeError("reproduce: d5pipe.runner.run_config_file(config_yaml, out_dir) is not available")
    return cast(RerunFn, fn)


def main(args: argparse.Namespace) -> int:
    rerun = getattr(args, "rerun", None) or _default_rerun()
    verdict = reproduce(args.bundle, args.out, args.strict_env, rerun, policy_from_args(args))
    if verdict.status == "tampered":
        print(f"{args.bundle}: bundle does not match its checksums; not re-run:", file=sys.stderr)
        for line in verdict.checksum_problems:
            print(f"  {line}", file=sys.stderr)
        return verdict.exit_code
    if verdict.env_differences:
        print(f"warning: environment differs (env_hash {verdict.env_reference_hash} -> {verdict.env_current_hash}):",
              file=sys.stderr)
        for line in verdict.env_differences[:40]:
            print(f"  {line}", file=sys.stderr)
        if len(verdict.env_differences) > 40:
            print(f"  ... {len(verdict.env_differences) - 40} more in {verdict.report_path}", file=sys.stderr)
    out_dir = Path(verdict.report_path).parent
    if (out_dir / "results.parquet").exists():
        from d5pipe.report import build_report

        build_report(out_dir)  # the re-run's report now shows the verdict
    for line in verdict.failures:
        print(line)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(verdict.counts.items()))
    print(f"{verdict.status.replace('_', ' ')} ({counts}); report: {verdict.report_path}")
    return verdict.exit_code
