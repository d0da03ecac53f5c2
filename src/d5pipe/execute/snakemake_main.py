"""The Snakemake process of ``d5pipe run``: it imports Snakemake while d5pipe still plans.

``d5pipe run`` starts ``python -m d5pipe.execute.snakemake_main`` before it composes the config
(d5pipe.execute.snakemake_run.start_snakemake). This process imports Snakemake, builds its argument
parser once (which collects the executor, storage and report plugins) and imports what the
Snakefile imports -- about 2 s on one core, while the other plans. Then it reads one line from
stdin: the JSON list of Snakemake's arguments (a list, never a shell string), or end-of-file to
exit unused. It runs Snakemake's command line with them and exits with Snakemake's exit code as
soon as Snakemake returns: ``os._exit``, because Snakemake's job-rate limiter leaves a
non-daemon one-second timer thread that would otherwise hold the exit.

**A local run never touches SLURM.** Snakemake imports every installed executor plugin when it
builds its argument parser, and the SLURM plugin runs ``scontrol show config`` while it is
imported (to word a help text): on a machine with Slurm's client but no reachable controller that
waits about 9 s (the plugin's own 10 s limit) in every run. This process builds Snakemake's
executor registry itself, without the SLURM plugins (:data:`SLURM_PLUGINS`), and adds them only
when its arguments ask for SLURM (:func:`wants_slurm`). Under SLURM the name ``slurm`` is d5pipe's
executor (d5pipe.execute.slurm_executor: the plugin's, held to the site's limits), and the jobs it
submits run d5pipe.execute.snakemake_job, which loads the job-step plugin alone.

pandas and numpy are deferred (d5pipe.execute.deferred_import): the SLURM plugin imports them at
import time, but in this process only the report job uses them, and it imports them in the
background while the shards run (d5pipe.execute.jobs.preload_report).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
import sys
from typing import Any

DEFERRED = ("pandas", "numpy")
"""Imported on first use in this process (see the module docstring)."""

SLURM_PLUGINS = ("snakemake_executor_plugin_slurm", "snakemake_executor_plugin_slurm_jobstep")
"""Executor plugins this process imports only for a SLURM run."""
OWN_EXECUTORS = {"snakemake_executor_plugin_slurm": "d5pipe.execute.slurm_executor",
                 "snakemake_executor_plugin_slurm_jobstep": "d5pipe.execute.slurm_jobstep"}
"""Plugin module -> the d5pipe module registered under its name in d5pipe's own Snakemake processes."""


def wants_slurm(args: list[str]) -> bool:
    """Whether Snakemake's arguments may select the SLURM executor: ``--executor slurm*``, or a
    profile (``--profile``/``--workflow-profile``), which may name it (d5pipe's local command line
    has neither)."""
    for i, arg in enumerate(args):
        if arg in ("--profile", "--workflow-profile") or arg.startswith(("--profile=", "--workflow-profile=")):
            return True
        value = args[i + 1] if arg in ("--executor", "-e") and i + 1 < len(args) else (
            arg.split("=", 1)[1] if arg.startswith("--executor=") else "")
        if value.startswith("slurm"):
            return True
    return False


def executor_registry(slurm: bool, plugins: tuple[str, ...] = SLURM_PLUGINS) -> Any:
    """Snakemake's executor-plugin registry (a process-wide singleton), built here on first call:
    every installed plugin except :data:`SLURM_PLUGINS`, unless ``slurm``; then ``plugins`` of them
    are added (d5pipe's own executor in place of a plugin named in :data:`OWN_EXECUTORS`).
    Snakemake's argument parser reads the registry as it is."""
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    registry = ExecutorPluginRegistry.__new__(ExecutorPluginRegistry)  # the singleton
    if not hasattr(registry, "plugins"):  # not built yet: build it, so __init__ will not
        registry.plugins = {}
        for info in pkgutil.iter_modules():
            if info.ispkg and info.name.startswith(registry.module_prefix) and info.name not in SLURM_PLUGINS:
                registry.register_plugin(info.name, importlib.import_module(info.name))
        from snakemake.executors import dryrun, local, touch

        for name, module in (("local", local), ("dryrun", dryrun), ("touch", touch)):
            registry.register_plugin(name, module)
    if slurm:
        for name in plugins:
            if importlib.util.find_spec(name) is not None:
                registry.register_plugin(name, importlib.import_module(OWN_EXECUTORS.get(name, name)))
    return registry


def warm() -> None:
    """Import and initialise what every Snakemake run of d5pipe needs; errors surface later."""
    from d5pipe.execute.deferred_import import defer

    defer(*DEFERRED)
    try:
        executor_registry(slurm=False)  # first: importing Snakemake's scheduler builds the registry
        import jsonschema  # noqa: F401  (the Snakefile validates plan/index.json)
        import smart_open  # noqa: F401  (Snakemake's source cache)
        import snakemake.cli

        import d5pipe.execute.jobs  # noqa: F401  (workflow/rules/report.smk)
        import d5pipe.execute.snakefile_api as api

        snakemake.cli.parse_args(["--cores", "1"])  # plugin registries are collected once per process
        api.plan_index_schema()
    except Exception:  # noqa: BLE001 - the real run below reports any problem in full
        pass


def read_args(line: str) -> list[str]:
    args = json.loads(line)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SystemExit("d5pipe.execute.snakemake_main: expected a JSON list of strings on stdin")
    return args


def run_cli(args: list[str], plugins: tuple[str, ...] = SLURM_PLUGINS) -> None:
    """Snakemake's command line with ``args`` (``plugins``: the SLURM plugins to load if they are
    asked for); exits with Snakemake's exit code (``os._exit``: see the module docstring)."""
    sys.argv[1:] = args  # what Snakemake's log records as the command
    code: int = 1
    try:
        executor_registry(slurm=wants_slurm(args), plugins=plugins)
        import snakemake.cli

        snakemake.cli.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def main() -> None:
    warm()
    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)
    run_cli(read_args(line))


if __name__ == "__main__":
    main()
