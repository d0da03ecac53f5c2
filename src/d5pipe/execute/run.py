"""``d5pipe run`` and ``d5pipe plan`` as plain functions (argument parsing lives in d5pipe.cli)."""

from __future__ import annotations

import time
from pathlib import Path

from d5pipe import WorkflowFailed
from d5pipe.config.compose import compose_plain
from d5pipe.execute.summary import PlanSummary, summarize
from d5pipe.plan.build import Plan, build_plan
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.plan_files import invalidate_stale_markers, remove_failed, write_plan


def load_plan(
    experiment: str,
    overrides: list[str],
    config_dirs: list[str] | None = None,
    executor: str | None = None,
) -> Plan:
    """Compose, validate and expand; nothing is written."""
    ov = list(overrides)
    if executor:
        ov.append(f"executor={executor}")
    return build_plan(compose_plain(experiment, ov, list(config_dirs or [])))


def default_out(plan: Plan) -> Path:
    return Path("runs") / plan.experiment


def prepare_run(plan: Plan, run_dir: Path, overrides: list[str], retry_failed: bool = False) -> PlanSummary:
    """Write config, plan and manifest into ``run_dir``; drop markers of shards with missing points.

    Returns what is done and what is left. Records kept from an earlier run of ``run_dir`` made
    in another environment are announced (they are not re-measured).
    """
    from d5pipe.provenance.environment import env_hash, environment_record
    from d5pipe.rundir.manifest import build_manifest, read_manifest, write_manifest

    run_dir.mkdir(parents=True, exist_ok=True)
    previous = read_manifest(run_dir).get("submit_env_hash")
    write_plan(run_dir, plan, overrides)
    env = environment_record()
    current = env_hash(env)
    write_manifest(run_dir, build_manifest(plan, env, current))
    if retry_failed:
        remove_failed(run_dir, plan)
    invalidate_stale_markers(run_dir, plan)
    summary = summarize(plan, run_dir)
    kept = sum(s.points_done for s in summary.stages)
    if previous and previous != current and kept:
        # point IDs name configs, not code or machines: say so before reusing old records
        print(f"d5pipe: note: the environment changed since {run_dir} was planned (env {previous} -> "
              f"{current}; `d5pipe env --diff` explains); its {kept} recorded points are kept, not "
              "re-measured. Use a new --out to measure every point here.", flush=True)
    if any(s.points_done < s.points for s in summary.stages):
        # Snakemake does not re-create a missing intermediate file while the final outputs are
        # newer, so drop the aggregate output too: it then needs the shard markers again.
        RunDir(run_dir).results_path.unlink(missing_ok=True)
    return summary


def run(
    experiment: str,
    overrides: list[str],
    out: Path | None = None,
    jobs: int | None = None,
    executor: str | None = None,
    config_dirs: list[str] | None = None,
    retry_failed: bool = False,
    snakemake_args: list[str] | None = None,
    timeout: float | None = None,
    dry_run: bool = False,
) -> Path:
    """Plan, then run the workflow; returns the run directory. Raises D5PipeError on failure.

    ``dry_run``: write the plan into the run directory and show Snakemake's job list only.
    """
    from d5pipe.execute.snakemake import build_command, run_snakemake

    plan = load_plan(experiment, overrides, config_dirs, executor)
    run_dir = Path(out) if out else default_out(plan)
    ov = list(overrides) + ([f"executor={executor}"] if executor else [])
    summary = prepare_run(plan, run_dir, ov, retry_failed)
    todo = sum(s.points - s.points_done for s in summary.stages)
    print(f"d5pipe: {plan.experiment}: {summary.points} points ({todo} to run) in {run_dir}", flush=True)
    cmd = build_command(run_dir, plan.config["executor"], jobs, snakemake_args, dry_run=dry_run)
    t0 = time.perf_counter()
    rc = run_snakemake(cmd, timeout)
    if dry_run:
        if rc != 0:
            raise WorkflowFailed(f"snakemake --dry-run failed (exit {rc}) for {run_dir}")
        return run_dir
    if rc != 0:
        raise WorkflowFailed(
            f"workflow failed (snakemake exit {rc}); see {run_dir}/logs/ and {run_dir}/.snakemake/log/"
        )
    from d5pipe.provenance.bundle import write_checksums

    write_checksums(run_dir)  # the run directory is a bundle: seal it
    print(f"d5pipe: done in {time.perf_counter() - t0:.1f} s", flush=True)
    return run_dir


def run_config_file(config_yaml: Path, out: Path, jobs: int | None = None, timeout: float | None = None) -> Path:
    """Re-run exactly a composed config (e.g. a bundle's ``config.yaml``) into ``out``.

    Used by ``d5pipe reproduce``: no Hydra composition, so the bundle's values and root seed are
    taken as they are; the derived point IDs and seeds therefore match the original run.
    """
    import yaml

    from d5pipe import D5PipeError
    from d5pipe.execute.snakemake import build_command, run_snakemake

    try:
        with open(config_yaml, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise D5PipeError(f"{config_yaml}: cannot read config ({exc})") from exc
    if not isinstance(config, dict) or "name" not in config:
        raise D5PipeError(f"{config_yaml}: not a d5pipe config (no 'name')")
    from d5pipe.config.validate import check_config

    try:
        check_config(config)
    except D5PipeError as exc:
        raise D5PipeError(f"{config_yaml}: {exc}") from exc
    plan = build_plan(config)
    out = Path(out)
    prepare_run(plan, out, ["(re-run of " + str(config_yaml) + ")"])
    cmd = build_command(out, config.get("executor", {"name": "local"}), jobs)
    rc = run_snakemake(cmd, timeout)
    if rc != 0:
        raise WorkflowFailed(f"re-run failed (snakemake exit {rc}); see {out}/logs/")
    return out
