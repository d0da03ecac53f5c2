"""``d5pipe env``: print this machine's environment record and hash, or diff two records.

A run's manifest holds two records: ``environment``, where the result rows were measured (the
shard processes), and ``submit_environment``, the process that ran ``d5pipe run``. They differ in
the thread variables at least: Snakemake sets ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ... of every
job to the rule's threads. ``--diff`` compares the measurement records; ``--diff --submit`` the
submitting ones (which is where a thread variable exported by the user shows up).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from d5pipe.core.errors import D5PipeError
from d5pipe.provenance import environment as envinfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the full record as JSON")
    parser.add_argument("--hash", action="store_true", help="print only the env_hash")
    parser.add_argument("--lock", action="store_true",
                        help="print an installable lock of this environment (a pip requirements file)")
    parser.add_argument(
        "--diff", nargs="+", metavar="PATH", type=Path,
        help="explain differences: PATH (manifest.json, run dir or bundle) vs this machine, or PATH vs PATH2",
    )
    parser.add_argument("--check", type=Path, metavar="BUNDLE",
                        help="what differs between BUNDLE's locked environment and this one, and whether "
                             "`d5pipe reproduce --rebuild-env` can close the gap (nothing is run)")
    parser.add_argument(
        "--submit", action="store_true",
        help="with --diff: compare the manifests' submit_environment (the process that ran `d5pipe run`) "
        "instead of environment (where the points were measured)",
    )


def summary_lines(record: dict[str, object]) -> list[str]:
    """A short human summary of a record (the full record is ``--json``)."""
    def get(dotted: str) -> object:
        cur: object = record
        for part in dotted.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        return cur

    packages = record.get("packages")
    return [
        f"env_hash   {envinfo.env_hash(record)}",
        f"python     {get('python.implementation')} {get('python.version')}",
        f"packages   {len(packages) if isinstance(packages, dict) else 0} distributions",
        (f"torch      {get('torch.version')} (cuda {get('torch.cuda')}, cudnn {get('torch.cudnn')}, "
         f"threads {get('torch.num_threads')}/{get('torch.num_interop_threads')})"),
        f"mpi        {get('mpi.library')}",
        f"horovod    {json.dumps(get('horovod'))}",
        f"cpu        {get('cpu.model')} ({get('cpu.logical_cpus')} logical, {get('cpu.affinity_cpus')} usable)",
        f"gpu        {get('gpu.models')} driver {get('gpu.driver')}",
        f"os         {get('os.distro')} kernel {get('os.kernel')}",
        f"hostname   {record.get('hostname')}",
        f"git        {get('git.commit')} dirty={get('git.dirty')}",
    ]


def main(args: argparse.Namespace) -> int:
    if args.diff:
        paths: list[Path] = list(args.diff)
        if len(paths) > 2:
            raise D5PipeError(f"env --diff takes one or two paths, got {len(paths)}")
        key = "submit_environment" if args.submit else "environment"
        a = envinfo.load_record(paths[0], key)
        b = envinfo.load_record(paths[1], key) if len(paths) == 2 else envinfo.environment_record()
        ha, hb = envinfo.env_hash(a), envinfo.env_hash(b)
        print(f"env_hash {ha} vs {hb}: {'same' if ha == hb else 'different'}")
        for line in envinfo.diff_records(a, b):
            print(f"  {line}")
        return 0
    if args.check:
        return _check(args.check)
    if args.lock:
        from d5pipe.provenance.lock import current_lock, lock_text

        print(lock_text(current_lock()), end="")
        return 0
    record = envinfo.environment_record()
    if args.hash:
        print(envinfo.env_hash(record))
    elif args.json:
        print(json.dumps(record, indent=1, sort_keys=True))
    else:
        print("\n".join(summary_lines(record)))
    return 0


def _check(bundle: Path) -> int:
    """``--check BUNDLE``: the gap between the bundle's lock and this environment (exit 0)."""
    from d5pipe.provenance.rebuild import bundle_lock, gap

    _, locked, python = bundle_lock(bundle)
    found = gap(locked, python)
    lines = found.lines()
    print(f"{bundle}: {len(locked)} locked distributions; {len(found.differ)} differ here, "
          f"{len(found.extra)} here only" + ("" if lines else ": the same environment"))
    for line in lines:
        print(f"  {line}")
    if found.blockers:
        print("reproduce --rebuild-env cannot close the gap:")
        for line in found.blockers:
            print(f"  {line}")
    elif found.differ:
        print(f"reproduce --rebuild-env can close the gap: it installs {len(found.differ)} distribution(s) "
              "over this environment" + (" (the ones here only stay visible)" if found.extra else ""))
    return 0
