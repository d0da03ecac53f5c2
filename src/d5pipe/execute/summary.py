"""What a plan means for a run directory: points and jobs per stage, done and to do (``d5pipe plan``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5pipe.config.schema import ExecutorConf
from d5pipe.core.fields import setting
from d5pipe.plan.build import Plan
from d5pipe.plan.point_config import stage_repetitions
from d5pipe.rundir.plan_files import existing_records


@dataclass
class StageSummary:
    stage: str
    points: int
    points_done: int
    jobs: int
    jobs_done: int
    points_per_shard: int
    axes: list[str]
    expected_s_per_job: float = 0.0
    """The largest expected work of one of the stage's shards (d5pipe.plan.cost), seconds."""
    submissions: int = 0
    """sbatch calls under SLURM (one per job array of up to ``executor.array_limit`` tasks);
    0 for the local executor."""


@dataclass
class PlanSummary:
    experiment: str
    run_dir: str
    points: int
    stages: list[StageSummary]
    other_jobs: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    slurm: bool = False
    shards_reset: int = 0
    """Shards whose completion marker was removed because a point lost its record."""
    repetitions: dict[str, int] = field(default_factory=dict)
    """Stage -> processes each of its points is measured in (config ``repetitions``, else the
    level's own); the points count them all."""

    def all_done(self) -> bool:
        return self.shards_reset == 0 and all(st.jobs_done == st.jobs and st.points_done == st.points
                                              for st in self.stages)

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
            "repetitions": self.repetitions,
        }


def _submissions(plan: Plan, stage: str, jobs: int) -> int:
    """sbatch calls for ``jobs`` shard jobs of ``stage`` (see d5pipe.execute.run.slurm_args)."""
    ex = plan.config.get("executor") or {}
    if ex.get("name") != "slurm":
        return 0
    from d5pipe.execute.placement import placed_stages
    from d5pipe.levels.registry import array_job

    if jobs <= 1 or not setting(ex, ExecutorConf, "arrays") or not array_job(stage, stage in placed_stages(plan)):
        return jobs
    return math.ceil(jobs / int(setting(ex, ExecutorConf, "array_limit")))


def summarize(plan: Plan, run_dir: Path, seconds: float = 0.0) -> PlanSummary:
    """Points and jobs per stage, and how many are already done in ``run_dir``."""
    stages = []
    for stage, sp in plan.stages.items():
        done = existing_records(run_dir, stage)
        done_flags = [pid in done for pid in sp.point_ids]
        stages.append(StageSummary(
            stage=stage, points=len(sp.point_ids), points_done=sum(done_flags), jobs=sp.n_shards,
            jobs_done=sum(all(done_flags[j] for j in sp.shard_slice(i)) for i in range(sp.n_shards)),
            points_per_shard=sp.points_per_shard, axes=list(sp.axes),
            expected_s_per_job=max((sp.shard_cost_s(i) for i in range(sp.n_shards)), default=0.0),
            submissions=_submissions(plan, stage, sp.n_shards)))
    other = {"prepare_data": len(plan.datasets), **({"build_operator": len(plan.builds)} if plan.builds else {}),
             "report": 1}
    slurm = (plan.config.get("executor") or {}).get("name") == "slurm"
    return PlanSummary(plan.experiment, str(run_dir), plan.n_points(), stages, other, seconds, slurm,
                       repetitions={st: stage_repetitions(plan.config, st) for st in plan.stages})


def format_summary(s: PlanSummary) -> str:
    lines = [f"experiment {s.experiment}: {s.points} points, {s.total_jobs()} jobs -> {s.run_dir}"]
    sb = f"{'sbatch':>8}" if s.slurm else ""
    lines.append(f"  {'stage':<14}{'points':>10}{'done':>10}{'jobs':>8}{'done':>8}{'~s/job':>8}{sb}  axes")
    for st in s.stages:
        sub = f"{st.submissions:>8}" if s.slurm else ""
        lines.append(
            f"  {st.stage:<14}{st.points:>10}{st.points_done:>10}{st.jobs:>8}{st.jobs_done:>8}"
            f"{st.expected_s_per_job:>8.0f}{sub}  {', '.join(st.axes) or '-'}"
        )
    if s.slurm:
        lines.append("  (sbatch: submissions; a stage's shards go as job arrays, level 3 one job per shard)")
    for name, n in s.other_jobs.items():
        lines.append(f"  {name:<14}{'':>10}{'':>10}{n:>8}")
    counts = sorted(set(s.repetitions.values()))
    if counts and counts[-1] > 1:
        each = (f"{counts[0]}" if len(counts) == 1 else
                ", ".join(f"{st} {n}" for st, n in s.repetitions.items()))
        lines.append(f"  (repetitions: {each}: every point is measured in that many separate shard jobs, axis "
                     "'repeat'; as many times the work of one)")
    else:
        lines.append("  (repetitions: 1: timings are not compared across runs; repetitions=N measures each "
                     "point in N processes)")
    lines.append(f"  (~s/job: expected work of the largest shard, from each level's cost model; planned in {s.seconds:.2f} s)")
    return "\n".join(lines)
