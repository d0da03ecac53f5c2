"""``d5pipe bundle RUN_DIR``: seal a run with ``CHECKSUMS.sha256``; archive, verify or extract a bundle.

* ``d5pipe bundle RUN``: write the checksum file (a run already sealed and intact is left as is;
  one whose files no longer match is refused unless ``--rehash``);
* ``--archive [OUT]``: seal, then write ``OUT`` (default ``RUN.tar.gz``);
* ``--verify``: only check the files against the checksum file (exit 3 on any problem);
* ``--extract DEST``: PATH is an archive; extract it safely into DEST.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from d5pipe.core.errors import D5PipeError
from d5pipe.provenance import bundle
from d5pipe.rundir.layout import RunDir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="run directory (an archive with --extract)")
    parser.add_argument("--archive", nargs="?", const="", default=None, metavar="OUT",
                        help="also write a .tar.gz (default RUN_DIR.tar.gz)")
    parser.add_argument("--rehash", action="store_true",
                        help="rewrite CHECKSUMS.sha256 from the files as they are now")
    parser.add_argument("--verify", action="store_true",
                        help="only check RUN_DIR against its checksums (exit 3 on problems)")
    parser.add_argument("--extract", type=Path, default=None, metavar="DEST",
                        help="extract the archive PATH into DEST (refusing unsafe members)")


def seal(run_dir: Path, rehash: bool) -> Path:
    """Write the checksum file unless an intact one exists; refuse a changed run without ``rehash``."""
    path = run_dir / bundle.CHECKSUMS_NAME
    if path.exists() and not rehash:
        problems = bundle.verify(run_dir)
        if problems:
            raise D5PipeError(f"{run_dir}: files changed since it was sealed ({problems[0]}); "
                              "use --rehash to re-seal it")
        return path
    return bundle.write_checksums(run_dir)


def main(args: argparse.Namespace) -> int:
    path: Path = args.path
    if args.extract is not None:
        print(bundle.extract(path, args.extract))
        return 0
    if args.verify:
        problems = bundle.verify(path)
        for line in problems:
            print(line, file=sys.stderr)
        print(f"{path}: {'intact' if not problems else f'{len(problems)} problem(s)'}")
        return 3 if problems else 0
    RunDir.of(path).require_run()  # only a d5pipe run directory is sealed
    left_out = bundle.left_out_records(path)
    if left_out:
        print(f"d5pipe: {len(left_out)} point record(s) left out of the bundle: not points of the current plan "
              f"(an earlier config or code version, whose code code/ no longer holds), e.g. {left_out[0]}")
    print(seal(path, args.rehash))
    if args.archive is not None:
        print(bundle.archive(path, Path(args.archive) if args.archive else None))
    return 0
