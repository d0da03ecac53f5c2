"""``d5pipe run`` and ``d5pipe plan`` as plain functions (argument parsing lives in d5pipe.cli)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import Any

from d5pipe.config.compose import compose_plain
from d5pipe.config.schema import ExecutorConf
from d5pipe.core.errors import DiskFull, WorkflowFailed
from d5pipe.core.fields import setting
from d5pipe.execute.summary import PlanSummary, summarize
from d5pipe.plan.build import Plan, build_plan
from d5pipe.results.verdicts import RunVerdict
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.plan_files import invalidate_stale_markers, remove_failed, write_plan


def load_plan(experiment: str, overrides: list[str], config_dirs: list[str] | None = None,
              executor: str | None = None, run_dir: Path | None = None) -> Plan:
    """Compose, validate and expand; nothing is written.

    ``run_dir`` (``d5pipe run``'s ``--out``; ``runs/<name>`` when None): the plan it remembers
    is used when it was made from this very config (d5pipe.plan.cache), else a full plan."""
    from d5pipe.plan import cache

    ov = list(overrides)
    if executor:
        ov.append(f"executor={executor}")
    config = compose_plain(experiment, ov, list(config_dirs or []))
    where = Path(run_dir) if run_dir is not None else Path("runs") / str(config["name"])
    more = RunDir.of(where).more_repetitions
    return cache.load(where, config, more) or build_plan(config, more)


def default_out(plan: Plan) -> Path:
    return Path("runs") / plan.experiment


def prepare_run(plan: Plan, run_dir: Path, overrides: list[str], retry_failed: bool = False) -> PlanSummary:
    """Write config, plan and manifest into ``run_dir``; drop markers of shards with missing points.

    Returns what is done and what is left. Records kept from an earlier run of ``run_dir`` made
    in another environment are announced (they are not re-measured).
    """
    from d5pipe.plan import cache
    from d5pipe.provenance.environment import env_hash, environment_record
    from d5pipe.rundir.manifest import build_manifest, read_manifest, write_manifest

    run_dir.mkdir(parents=True, exist_ok=True)
    previous = read_manifest(run_dir).get("submit_env_hash")
    write_plan(run_dir, plan, overrides)
    cache.store(run_dir, plan)
    # the submitter imports neither torch nor Horovod; the static parts are cached per run
    env = environment_record(cache_dir=RunDir.of(run_dir).env_dir / "cache", light=True)
    current = env_hash(env)
    write_manifest(run_dir, build_manifest(plan, env, current))
    if retry_failed:
        remove_failed(run_dir, plan)
    rerun_shards = invalidate_stale_markers(run_dir, plan)
    summary = summarize(plan, run_dir)
    summary.shards_reset = len(rerun_shards)
    kept = sum(s.points_done for s in summary.stages)
    if previous and previous != current and kept:
        # point IDs name configs, not code or machines: say so before reusing old records
        print(f"d5pipe: note: the environment changed since {run_dir} was planned (env {previous} -> "
              f"{current}; `d5pipe env --diff` explains); its {kept} recorded points are kept, not "
              "re-measured. Use a new --out to measure every point here.", flush=True)
    if rerun_shards or any(s.points_done < s.points for s in summary.stages):
        # Snakemake does not re-create a missing intermediate file while the final outputs are
        # newer, so drop the aggregate output too: it then needs the shard markers again.
        RunDir.of(run_dir).results_path.unlink(missing_ok=True)
    return summary


def run(experiment: str, overrides: list[str], out: Path | None = None, jobs: int | None = None,
        executor: str | None = None, config_dirs: list[str] | None = None, retry_failed: bool = False,
        snakemake_args: list[str] | None = None, timeout: float | None = None, dry_run: bool = False,
        force: bool = False, verbose: bool = False) -> RunOutcome:
    """Plan, then run the workflow; returns the run directory and its verdict.

    ``dry_run``: write the plan into the run directory and show Snakemake's job list only.
    Raises D5PipeError for user errors (before any job), Interrupted when stopped.
    """
    plan = load_plan(experiment, overrides, config_dirs, executor)
    run_dir = Path(out) if out else default_out(plan)
    ov = list(overrides) + ([f"executor={executor}"] if executor else [])
    return execute_plan(plan, run_dir, ov, jobs=jobs, retry_failed=retry_failed,
                        snakemake_args=snakemake_args, timeout=timeout, dry_run=dry_run,
                        force=force, verbose=verbose)


@dataclass
class RunOutcome:
    run_dir: Path
    verdict: RunVerdict | None
    """None for a dry run."""


def restore_datasets(plan: Plan, rd: RunDir) -> None:
    """Datasets of the plan that the user cache holds go into ``RUN/data`` before Snakemake starts,
    so no ``prepare_data`` job runs for them (d5pipe.rundir.data_cache); one line says so."""
    from d5pipe.rundir.data_cache import restore

    restored = [r for key in sorted(plan.datasets) if not rd.dataset(key).exists()
                and (r := restore(key, rd.data_dir)) is not None]
    if restored:
        saved = sum(r.prepare_s for r in restored)
        print(f"d5pipe: {len(restored)} dataset(s) from the cache {restored[0].source.parent} "
              f"({', '.join(r.key for r in restored)}): no prepare_data job (preparing took {saved:.1f} s in it)",
              flush=True)


def execute_plan(plan: Plan, run_dir: Path, overrides: list[str], *, jobs: int | None = None,
                 retry_failed: bool = False, snakemake_args: list[str] | None = None,
                 timeout: float | None = None, dry_run: bool = False, force: bool = False,
                 verbose: bool = False, started: Popen[str] | None = None,
                 fork_server: Popen[bytes] | None = None) -> RunOutcome:
    """Claim and lock ``run_dir``, keep the user code in ``RUN/code/`` (after the claim: another
    experiment's directory is refused before anything is written), write the plan, run Snakemake,
    always leave results + report.

    ``started``: a Snakemake process from d5pipe.execute.snakemake_run.start_snakemake, already importing
    Snakemake; it is used for the run (or ended when none is needed). ``fork_server``: one from
    d5pipe.execute.fork_server.start, already importing torch, used if the run wants one (the
    caller discards it otherwise).
    """
    from d5pipe.config.code_dir import write_code
    from d5pipe.execute.snakemake import build_command
    from d5pipe.execute.snakemake_run import Interrupted, run_workflow, snakemake_log
    from d5pipe.rundir.ownership import RunLock, check_out_dir, claim, clear_stale_snakemake_locks

    check_out_dir(run_dir)
    rd = RunDir.of(run_dir)
    with RunLock(rd):
        claim(rd, plan.experiment, force)
        if stale := clear_stale_snakemake_locks(rd):
            print(f"d5pipe: removed {stale} stale Snakemake lock(s) of an earlier run of {run_dir} "
                  "that is no longer running", flush=True)
        if write_code(run_dir, plan.code):
            print(f"d5pipe: user code of {len(plan.code)} module(s) kept in {Path(run_dir) / 'code'}", flush=True)
        summary = prepare_run(plan, run_dir, overrides, retry_failed)
        todo = sum(s.points - s.points_done for s in summary.stages)
        print(f"d5pipe: {plan.experiment}: {summary.points} points ({todo} to run) in {run_dir}", flush=True)
        if todo and not dry_run:
            restore_datasets(plan, rd)
        executor = plan.config["executor"]
        slurm = executor.get("name") == "slurm"
        if not dry_run and summary.all_done() and up_to_date(rd, plan):
            print("d5pipe: nothing to do: every point has its record and the results are up to date", flush=True)
            return RunOutcome(run_dir, finish(run_dir, 0))
        extra = list(snakemake_args or [])
        snakemake_jobs = jobs
        if slurm:
            from d5pipe.execute.placement import check_nodes, placed_stages
            from d5pipe.execute.slurm_arrays import scheduler_args, scheduler_jobs

            if not dry_run:
                check_nodes(plan)  # a node index beyond the partition: one line, before any job
            extra = (slurm_args(executor, dry_run, placed_stages(plan))
                     + scheduler_args(executor, summary.total_jobs(), jobs) + extra)
            snakemake_jobs = scheduler_jobs(executor, summary.total_jobs(), jobs)
        cmd = build_command(run_dir, executor, snakemake_jobs, extra, dry_run=dry_run)
        t0 = time.perf_counter()
        try:
            with _fork_server(run_dir, executor, [s.stage for s in summary.stages], dry_run, fork_server):
                rc, _console = run_workflow(cmd, RunDir.of(run_dir), slurm, timeout, verbose or dry_run,
                                            started, float(setting(executor, ExecutorConf, "watchdog_s")))
        except Interrupted:
            if not dry_run:
                finish(run_dir, 1)  # what finished is in the results and the report
            raise
        if dry_run:
            if rc != 0:
                raise WorkflowFailed(f"snakemake --dry-run failed (exit {rc}); see {snakemake_log(rd)}")
            return RunOutcome(run_dir, None)
        full = _console.disk_full if rc != 0 else None  # a job's write found the disk full
        try:
            verdict = finish(run_dir, rc)  # a full disk here raises DiskFull itself
        except DiskFull:
            if full is None:
                raise
        if full is not None:  # the first write that failed; what finished is kept and the same command resumes
            raise DiskFull(full)
        if rc != 0:
            print(f"d5pipe: snakemake exit {rc}; its log: {snakemake_log(rd)}", flush=True)
        print(f"d5pipe: done in {time.perf_counter() - t0:.1f} s", flush=True)
        return RunOutcome(run_dir, verdict)


def _fork_server(run_dir: Path, executor: dict[str, Any], stages: list[str],
                 dry_run: bool, started: Popen[bytes] | None) -> contextlib.AbstractContextManager[Any]:
    """The run's fork server while Snakemake runs (local executor, ``executor.fork_server``; none
    for a dry run): d5pipe.execute.fork_server; ``started`` one already importing torch."""
    from d5pipe.config.schema import forks_repetitions
    from d5pipe.execute.fork_server import serving

    if dry_run or not forks_repetitions(executor):
        return contextlib.nullcontext()
    return serving(Path(run_dir), stages, started)


def slurm_args(executor: dict[str, Any], dry_run: bool = False, placed: Collection[str] = ()) -> list[str]:
    """Snakemake arguments for SLURM: a status source that works here, and job arrays for every
    stage whose shards all ask for the same resources (not level 3: tasks follow the ranks; not
    the ``placed`` stages, whose shards are pinned to different nodes)."""
    from d5pipe.execute.slurm_watch import status_args
    from d5pipe.execute.snakemake import profile_dirs
    from d5pipe.levels.registry import STAGES, array_job

    out = [] if dry_run else status_args(profile_dirs(executor))
    if out:
        print(f"d5pipe: SLURM job status from {out[-1]}", flush=True)
    if setting(executor, ExecutorConf, "arrays"):
        rules = [e for e in ("prepare_data", *STAGES) if array_job(e, e in placed)]
        out += ["--slurm-array-jobs", ",".join(rules),
                "--slurm-array-limit", str(int(setting(executor, ExecutorConf, "array_limit")))]
    return out


def up_to_date(rd: RunDir, plan: Plan) -> bool:
    """Every shard marker exists and results, report and verdict are newer than everything they
    are made from (what Snakemake would conclude, without paying for its start-up and DAG).

    The shard plans count: after the user's code changes back to a version whose points all have
    records, only ``plan/<stage>/<shard>.json`` names the other point IDs; the markers, results and
    verdict are still those of the version in between, so Snakemake must re-run the shards (each
    finds its points done) and the results."""
    try:
        made = min(p.stat().st_mtime_ns for p in (rd.results_path, rd.report_html, rd.verdict_path))
        inputs = [rd.config_path, rd.checks_path, rd.index_path]
        for stage, sp in plan.stages.items():
            inputs += [rd.marker(stage, name) for name in sp.shard_names()]
            inputs += [rd.shard_plan(stage, name) for name in sp.shard_names()]
        return all(p.stat().st_mtime_ns <= made for p in inputs)
    except FileNotFoundError:
        return False


def finish(run_dir: Path, snakemake_rc: int) -> RunVerdict:
    """Results and report exist after every run, also when jobs failed; seal; the run's verdict."""
    from d5pipe.provenance.bundle import write_checksums
    from d5pipe.results.verdicts import read_verdict

    rd = RunDir.of(run_dir)
    verdict = read_verdict(rd.root) if snakemake_rc == 0 else None
    if verdict is None or not rd.report_html.exists():
        from d5pipe.execute.jobs import write_outputs

        verdict = write_outputs(rd.root)  # what the failed jobs left, and what never ran
    write_checksums(rd.root)  # the run directory is a bundle: seal it
    return verdict


def run_config_file(config_yaml: Path, out: Path, jobs: int | None = None,
                    timeout: float | None = None, repetitions: int | None = None) -> Path:
    """Re-run exactly a composed config (e.g. a bundle's ``config.yaml``) into ``out``.

    Used by ``d5pipe reproduce`` and ``d5pipe ab``: no Hydra composition, so the bundle's values
    and root seed are taken as they are; the derived point IDs and seeds therefore match the
    original run. The extra repetitions of its configurations (``plan/repetitions.json`` beside
    the config) come along; ``repetitions`` replaces the config's count.
    """
    import shutil

    import yaml

    from d5pipe.config.validate import check_config
    from d5pipe.core.errors import D5PipeError

    try:
        with open(config_yaml, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise D5PipeError(f"{config_yaml}: cannot read config ({exc})") from exc
    if not isinstance(config, dict) or "name" not in config:
        raise D5PipeError(f"{config_yaml}: not a d5pipe config (no 'name')")
    if repetitions is not None:
        config["repetitions"] = int(repetitions)
    try:
        check_config(config)
    except D5PipeError as exc:
        raise D5PipeError(f"{config_yaml}: {exc}") from exc
    source = RunDir.of(Path(config_yaml).parent)
    target = RunDir.of(out)
    if source.repetitions_path.is_file() and source.root.resolve() != target.root.resolve():
        target.plan_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.repetitions_path, target.repetitions_path)
    plan = build_plan(config, target.more_repetitions)
    execute_plan(plan, Path(out), ["(re-run of " + str(config_yaml) + ")"], jobs=jobs, timeout=timeout)
    return Path(out)
