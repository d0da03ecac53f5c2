"""The Snakemake process of ``d5pipe run``: it imports Snakemake while d5pipe still plans.

``d5pipe run`` starts ``python -m d5pipe.execute.snakemake_main`` before it composes the config
(d5pipe.execute.driver.start_snakemake). This process imports Snakemake, builds its argument
parser once (which collects the executor, storage and report plugins) and imports what the
Snakefile imports -- about 2 s on one core, while the other plans. Then it reads one line from
stdin: the JSON list of Snakemake's arguments (a list, never a shell string), or end-of-file to
exit unused. It runs Snakemake's command line with them and exits with Snakemake's exit code as
soon as Snakemake returns: ``os._exit``, because Snakemake's job-rate limiter leaves a
non-daemon one-second timer thread that would otherwise hold the exit.

pandas and numpy are deferred (d5pipe.execute.deferred_import): Snakemake's SLURM plugin imports
them when Snakemake collects its executor plugins, but in this process only the report job uses
them, and it imports them in the background while the shards run (d5pipe.execute.jobs.preload_report).
"""

from __future__ import annotations

import json
import os
import sys

DEFERRED = ("pandas", "numpy")
"""Imported on first use in this process (see the module docstring)."""


def warm() -> None:
    """Import and initialise what every Snakemake run of d5pipe needs; errors surface later."""
    from d5pipe.execute.deferred_import import defer

    defer(*DEFERRED)
    try:
        import jsonschema  # noqa: F401  (the Snakefile validates plan/index.json)
        import smart_open  # noqa: F401  (Snakemake's source cache)
        import snakemake.cli

        import d5pipe.execute.jobs  # noqa: F401  (workflow/rules/report.smk)
        import d5pipe.execute.workflow_api as api

        snakemake.cli.parse_args(["--cores", "1"])  # plugin registries are collected once per process
        api.plan_index_schema()
    except Exception:  # noqa: BLE001 - the real run below reports any problem in full
        pass


def read_args(line: str) -> list[str]:
    args = json.loads(line)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SystemExit("d5pipe.execute.snakemake_main: expected a JSON list of strings on stdin")
    return args


def main() -> None:
    warm()
    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)
    args = read_args(line)
    sys.argv[1:] = args  # what Snakemake's log records as the command
    import snakemake.cli

    code: int = 1
    try:
        snakemake.cli.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
