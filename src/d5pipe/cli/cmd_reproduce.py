"""``d5pipe reproduce BUNDLE``: verify, re-run and compare a published run (exit 0 reproduced, 3 not).

The function that re-runs a config is ``args.rerun`` when the CLI main injected one
(``parser.set_defaults(rerun=...)``), else ``d5pipe.execute.run.run_config_file(config_yaml, out_dir)``.

Output: environment differences on stderr (those of the measurements, then those of the
submitting process), then on stdout one line per failure, one line per changed and per
inconclusive timing, and a summary line ``<verdict> (<counts>); timings: N equivalent, N
inconclusive, N changed; report: OUT/reproduce.json``. The verdict
policy (what fails, how timings count) is documented in :mod:`d5pipe.provenance.reproduce`.
``--rebuild-env`` first rebuilds (or takes from its cache) the bundle's Python environment from the
lock in its record (:mod:`d5pipe.provenance.rebuild`), says so on stderr with the time it took,
then runs the same command inside it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from d5pipe.cli.arguments import add_allow_argument, apply_allow
from d5pipe.cli.cmd_compare import add_policy_arguments, policy_from_args, timing_policy_from_args
from d5pipe.provenance.reproduce import EnvComparison, ReproduceVerdict, reproduce
from d5pipe.rundir.layout import RunDir

MAX_ENV_LINES = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="bundle directory or .tar.gz archive")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="where the re-run goes (absent or empty; default BUNDLE-reproduce)")
    parser.add_argument("--strict-env", action="store_true",
                        help="refuse (exit 2) when this environment's env_hash differs from the bundle's "
                             "submitting one; fail (exit 3) when the re-run's measurements ran in another")
    parser.add_argument("--strict-timing", action="store_true",
                        help="a changed timing makes the run not reproduced (default: reported only)")
    parser.add_argument("--rebuild-env", action="store_true",
                        help="re-run inside the bundle's Python environment, rebuilt from its lock (cached; "
                             "d5pipe.provenance.rebuild)")
    add_policy_arguments(parser)
    add_allow_argument(parser)


def _print_env(title: str, env: EnvComparison, report: Path) -> None:
    if not env.differences and env.same:
        return
    print(f"{title} (env_hash {env.reference_hash} -> {env.current_hash}):", file=sys.stderr)
    for line in env.differences[:MAX_ENV_LINES]:
        print(f"  {line}", file=sys.stderr)
    if len(env.differences) > MAX_ENV_LINES:
        print(f"  ... {len(env.differences) - MAX_ENV_LINES} more in {report}", file=sys.stderr)


def _timing_line(verdict: ReproduceVerdict) -> str:
    c = verdict.timing_counts
    gates = [g for g, on in (("changed fails: --strict-timing", verdict.strict_timing),
                             ("inconclusive fails: --fail-on-inconclusive", verdict.fail_on_inconclusive)) if on]
    how = "; ".join(gates) if gates else "reported, not counted as failures"
    untested = f", {c.get('not_compared', 0)} not compared" if c.get("not_compared") else ""
    return (f"timings: {c.get('equivalent', 0)} equivalent (reproduced), {c.get('inconclusive', 0)} inconclusive, "
            f"{c.get('changed', 0)} changed{untested} ({how})")


def _in_rebuilt_env(args: argparse.Namespace) -> int:
    """Rebuild (or reuse) the bundle's environment, then run this same command inside it."""
    import os
    import subprocess

    from d5pipe.provenance.bundle import opened_bundle, verify
    from d5pipe.provenance.rebuild import bundle_lock, rebuild

    with opened_bundle(args.bundle) as root:
        if verify(root):  # a bundle that does not match its checksums drives no install: say it as always
            args.rebuild_env = False
            return main(args)
    record, locked, python = bundle_lock(args.bundle)
    env = rebuild(locked, python)
    home = env.python.parent.parent
    if env.built:
        print(f"environment: built {home} in {env.seconds:.1f} s ({len(env.installed)} distribution(s) installed "
              f"over this one's: {', '.join(env.installed) or 'none'})", file=sys.stderr)
    else:
        print(f"environment: reused {home} in {env.seconds:.1f} s (building it took {env.built_s:.1f} s; "
              f"installed {', '.join(env.installed) or 'nothing'})", file=sys.stderr)
    print(f"environment: not rebuilt (recorded facts, compared below): {', '.join(_outside_lock(record, python))}",
          file=sys.stderr)
    argv = ["reproduce", *(a for a in getattr(args, "argv", sys.argv[2:]) if a != "--rebuild-env")]
    child = dict(os.environ, VIRTUAL_ENV=str(home), PATH=f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(env.python), "-m", "d5pipe.cli.main", *argv], env=child, check=False).returncode


def _outside_lock(record: dict[str, Any], python: str) -> list[str]:
    """What a rebuilt environment keeps from this machine: the interpreter and the system."""
    import platform

    git = record.get("git") or {}
    dirty = ([f"the uncommitted changes the bundle's d5pipe checkout had (diff sha256 {str(git.get('diff_sha256'))[:12]})"]
             if git.get("dirty") else [])
    return [f"the interpreter (bundle Python {python}, here {platform.python_version()})", *dirty,
            "system components (MPI library, Slurm, compilers, drivers)"]


def _print_lock_gap(bundle: Path) -> None:
    """Which locked distributions this environment holds otherwise, and the way to close the gap."""
    from d5pipe.provenance.rebuild import bundle_lock, gap

    _, locked, python = bundle_lock(bundle, required=False)
    if not locked:
        return
    found = gap(locked, python)
    if found.differ:
        named = ", ".join(f"{e.name} {e.version} -> {here.version if here else 'missing'}" for e, here in found.differ[:5])
        how = ("`d5pipe reproduce --rebuild-env` re-runs in the bundle's" if not found.blockers
               else f"--rebuild-env cannot: {found.blockers[0]}")
        print(f"environment: {len(found.differ)} locked distribution(s) differ here ({named}); {how}", file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    apply_allow(getattr(args, "allow", []) or [])  # the reproducer's trust, never the bundle's
    if getattr(args, "rebuild_env", False):
        return _in_rebuilt_env(args)
    rerun = getattr(args, "rerun", None) or importlib.import_module("d5pipe.execute.run").run_config_file
    verdict = reproduce(args.bundle, args.out, args.strict_env, rerun, policy_from_args(args),
                        strict_timing=args.strict_timing, timing=timing_policy_from_args(args),
                        fail_on_inconclusive=args.fail_on_inconclusive)
    if verdict.status == "tampered":
        print(f"{args.bundle}: bundle does not match its checksums; not re-run:", file=sys.stderr)
        for line in verdict.checksum_problems:
            print(f"  {line}", file=sys.stderr)
        print(f"tampered ({len(verdict.checksum_problems)} checksum problem(s)); report: {verdict.report_path}")
        return verdict.exit_code
    measured = EnvComparison(verdict.env_reference_hash, verdict.env_current_hash, verdict.env_differences)
    _print_env("warning: the measurements' environment differs", measured, verdict.report_path)
    _print_lock_gap(args.bundle)
    _print_env("note: the submitting environment differs (Snakemake sets the jobs' thread variables, "
               "so these need not reach the measurements)", verdict.submit_env, verdict.report_path)
    out_dir = Path(verdict.report_path).parent
    if RunDir.of(out_dir).results_path.exists():
        from d5pipe.results.report import build_report

        build_report(out_dir)  # the re-run's report now shows the verdict
    # with --strict-timing (--fail-on-inconclusive) the changed (undecided) timings are among the failures
    timings = ([] if verdict.strict_timing else verdict.timing_changes) + (
        [] if verdict.fail_on_inconclusive else verdict.timing_undecided)
    for line in [*verdict.failures, *(f"timing {t}" for t in timings)]:
        print(line)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(verdict.counts.items()))
    print(f"{verdict.status.replace('_', ' ')} ({counts}); {_timing_line(verdict)}; report: {verdict.report_path}")
    return verdict.exit_code
