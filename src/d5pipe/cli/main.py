"""Entry point of the ``d5pipe`` command: parse, dispatch, map user errors to one line + exit 2
(a full disk: one line naming the path and the free space, exit 75)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from d5pipe.core.errors import D5PipeError, DiskFull, is_disk_full
from d5pipe.core.version import __version__

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("d5pipe.cli.cmd_run", "run an experiment (plan, then the Snakemake workflow)"),
    "plan": ("d5pipe.cli.cmd_plan", "show points and jobs per stage without running anything"),
    "status": ("d5pipe.cli.cmd_status", "finished/failed/pending points of a run directory"),
    "report": ("d5pipe.cli.cmd_report", "rebuild report.html/report.md of a run directory"),
    "env": ("d5pipe.cli.cmd_env", "print the environment record and its hash; --diff A B"),
    "bundle": ("d5pipe.cli.cmd_bundle", "seal a run dir (CHECKSUMS.sha256); --archive, --verify, --extract"),
    "reproduce": ("d5pipe.cli.cmd_reproduce", "re-run a bundle and check it reproduced"),
    "compare": ("d5pipe.cli.cmd_compare", "compare two runs: each timing changed, equivalent or inconclusive"),
    "ab": ("d5pipe.cli.cmd_ab", "measure two runs' configs interleaved in time, then compare them"),
    "cancel": ("d5pipe.cli.cmd_cancel", "stop a SLURM run: its detached driver and its jobs"),
    "cache": ("d5pipe.cli.cmd_cache", "the prepared datasets shared by run directories; --clear"),
    "history": ("d5pipe.cli.cmd_history", "every finished run kept: import, runs, series, latest, check, trend"),
    "profile": ("d5pipe.cli.cmd_profile", "profile one point of a run afterwards (profile.parquet, traces, report)"),
    "peaks": ("d5pipe.cli.cmd_peaks", "the machine's ceilings (FLOP/s per dtype, bandwidth per memory level)"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"d5pipe: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def _usage() -> str:
    lines = ["usage: d5pipe COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
    lines.append("\nd5pipe COMMAND --help for the options of one command.")
    return "\n".join(lines)


def build_parser(command: str) -> OneLineParser:
    """The parser of one subcommand (options and positionals may be intermixed)."""
    module, help_text = SUBCOMMANDS[command]
    mod = importlib.import_module(module)
    parser = OneLineParser(prog=f"d5pipe {command}", description=help_text)
    mod.add_arguments(parser)
    parser.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args_list else 2
    if args_list[0] == "--version":
        print(f"d5pipe {__version__}")
        return 0
    command = args_list[0]
    if command not in SUBCOMMANDS:
        sys.stderr.write(f"d5pipe: error: unknown command {command!r} (one of: {', '.join(SUBCOMMANDS)})\n")
        return 2
    try:
        parser = build_parser(command)
        args = parser.parse_intermixed_args(args_list[1:])
        args.argv = args_list[1:]  # as given (d5pipe run --detach re-submits the same command)
        return int(args._main(args))
    except D5PipeError as err:
        sys.stderr.write(f"d5pipe: error: {err}\n")
        return err.exit_code
    except OSError as err:
        if not is_disk_full(err):
            raise
        full = DiskFull.at(err.filename or ".")  # a write outside d5pipe.core.atomic (a library's own file)
        sys.stderr.write(f"d5pipe: error: {full}\n")
        return full.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("d5pipe: interrupted\n")
        return 130
    except BrokenPipeError:  # e.g. `d5pipe plan X --json | head`
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
