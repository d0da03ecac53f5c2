"""``d5pipe run`` and ``d5pipe plan`` as plain functions (argument parsing lives in d5pipe.cli)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5pipe.config import compose_config, to_plain
from d5pipe.errors import WorkflowFailed
from d5pipe.plan import Plan, build_plan
from d5pipe.rundir import existing_records, invalidate_stale_markers, remove_failed, write_plan


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
    cfg = compose_config(experiment, ov, list(config_dirs or []))
    return build_plan(to_plain(cfg))


def default_out(plan: Plan) -> Path:
    return Path("runs") / plan.experiment


@dataclass
class StageSummary:
    stage: str
    points: int
    points_done: int
    jobs: int
    jobs_done: int
    points_per_shard: int
    axes: list[str]


@dataclass
class PlanSummary:
    experiment: str
    run_dir: str
    points: int
    stages: list[StageSummary]
    other_jobs: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def total_jobs(self) -> int:
        return sum(s.jobs for s in self.stages) + sum(self.other_jobs.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "run_dir": self.run_dir,
            "points": self.points,
            "jobs": self.total_jobs(),
            "stages": [s.__dict__ for s in self.stages],
            "other_jobs": self.other_jobs,
            "seconds": round(self.seconds, 3),
        }


def summarize(plan: Plan, run_dir: Path, seconds: float = 0.0) -> PlanSummary:
    """Points and jobs per stage, and how many are already done in ``run_dir``."""
    stages = []
    for stage, sp in plan.stages.items():
        done = existing_records(run_dir, stage)
        done_flags = [pid in done for pid in sp.point_ids]
        jobs_done = 0
        for i in range(sp.n_shards):
            if all(done_flags[j] for j in sp.shard_slice(i)):
                jobs_done += 1
        stages.append(
            StageSummary(
                stage=stage,
                points=len(sp.point_ids),
                points_done=sum(done_flags),
                jobs=sp.n_shards,
                jobs_done=jobs_done,
                points_per_shard=sp.points_per_shard,
                axes=list(sp.axes),
            )
        )
    other = {"prepare_data": len(plan.datasets), "aggregate": 1, "report": 1}
    return PlanSummary(plan.experiment, str(run_dir), plan.n_points(), stages, other, seconds)


def format_summary(s: PlanSummary) -> str:
    lines = [f"experiment {s.experiment}: {s.points} points, {s.total_jobs()} jobs -> {s.run_dir}"]
    lines.append(f"  {'stage':<14}{'points':>10}{'done':>10}{'jobs':>8}{'done':>8}  axes")
    for st in s.stages:
        lines.append(
            f"  {st.stage:<14}{st.points:>10}{st.points_done:>10}{st.jobs:>8}{st.jobs_done:>8}  "
            f"{', '.join(st.axes) or '-'}"
        )
    for name, n in s.other_jobs.items():
        lines.append(f"  {name:<14}{'':>10}{'':>10}{n:>8}")
    lines.append(f"  (planned in {s.seconds:.2f} s)")
    return "\n".join(lines)


def prepare_run(plan: Plan, run_dir: Path, overrides: list[str], retry_failed: bool = False) -> PlanSummary:
    """Write config, plan and manifest into ``run_dir``; drop markers of shards with missing points.

    Returns what is done and what is left. Records kept from an earlier run of ``run_dir`` made
    in another environment are announced (they are not re-measured).
    """
    from d5pipe.envinfo import env_hash, environment_record
    from d5pipe.manifest import build_manifest, read_manifest, write_manifest

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
        (run_dir / "results.parquet").unlink(missing_ok=True)
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
) -> Path:
    """Plan, then run the workflow; returns the run directory. Raises D5PipeError on failure."""
    from d5pipe.snakemake_cmd import build_command, run_snakemake

    plan = load_plan(experiment, overrides, config_dirs, executor)
    run_dir = Path(out) if out else default_out(plan)
    ov = list(overrides) + ([f"executor={executor}"] if executor else [])
    summary = prepare_run(plan, run_dir, ov, retry_failed)
    todo = sum(s.points - s.points_done for s in summary.stages)
    print(f"d5pipe: {plan.experiment}: {summary.points} points ({todo} to run) in {run_dir}", flush=True)
    cmd = build_command(run_dir, plan.config["executor"], jobs, snakemake_args)
    t0 = time.perf_counter()
    rc = run_snakemake(cmd, timeout)
    if rc != 0:
        raise WorkflowFailed(
            f"workflow failed (snakemake exit {rc}); see {run_dir}/logs/ and {run_dir}/.snakemake/log/"
        )
    from d5pipe.bundle import write_checksums

    write_checksums(run_dir)  # the run directory is a bundle: seal it
    print(f"d5pipe: done in {time.perf_counter() - t0:.1f} s", flush=True)
    return run_dir


def run_config_file(config_yaml: Path, out: Path, jobs: int | None = None, timeout: float | None = None) -> Path:
    """Re-run exactly a composed config (e.g. a bundle's ``config.yaml``) into ``out``.

    Used by ``d5pipe reproduce``: no Hydra composition, so the bundle's values and root seed are
    taken as they are; the derived point IDs and seeds therefore match the original run.
    """
    import yaml

    from d5pipe.errors import D5PipeError
    from d5pipe.snakemake_cmd import build_command, run_snakemake

    try:
        with open(config_yaml, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise D5PipeError(f"{config_yaml}: cannot read config ({exc})") from exc
    if not isinstance(config, dict) or "name" not in config:
        raise D5PipeError(f"{config_yaml}: not a d5pipe config (no 'name')")
    plan = build_plan(config)
    out = Path(out)
    prepare_run(plan, out, ["(re-run of " + str(config_yaml) + ")"])
    cmd = build_command(out, config.get("executor", {"name": "local"}), jobs)
    rc = run_snakemake(cmd, timeout)
    if rc != 0:
        raise WorkflowFailed(f"re-run failed (snakemake exit {rc}); see {out}/logs/")
    return out
