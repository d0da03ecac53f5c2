"""``d5pipe plan EXPERIMENT [overrides...] [--json] [--show-config] [--allow PREFIX]``: what would run,
without running it; ``--show-config`` prints the composed, validated config instead.

With a run directory (``--out``, default ``runs/EXPERIMENT``) that was run before, points whose
user code changed since are named with the reason ("4 points stale: source of mypkg.models
changed (mypkg/models.py)"; d5pipe.config.code_dir). Points this environment cannot run (a runtime
or the zoo's model library not installed) are named too (d5pipe.plan.availability).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from d5pipe.cli.arguments import add_allow_argument, add_until_decided_arguments, apply_allow
from d5pipe.execute.run import default_out, load_plan
from d5pipe.execute.summary import format_summary, summarize
from d5pipe.plan.availability import unavailable
from d5pipe.plan.build import Plan


def code_stale(plan: Plan, run_dir: Path) -> list[str]:
    """Why points of ``plan`` are stale in ``run_dir`` because user code changed (one line each)."""
    from d5pipe.config.code_dir import read_index, stale_reasons
    from d5pipe.rundir.plan_files import existing_records

    previous = read_index(run_dir)
    if not previous or not plan.code:
        return []
    points: dict[str, list[tuple[str, bool]]] = {}
    for stage, sp in plan.stages.items():
        done = existing_records(run_dir, stage)
        for pid, modules in zip(sp.point_ids, sp.modules):
            for m in modules:
                points.setdefault(m, []).append((pid, pid in done))
    return stale_reasons(previous, plan.code, points)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--out", type=Path, help="run directory to check for finished points")
    p.add_argument("--executor", choices=["local", "slurm"])
    p.add_argument("--config-dir", action="append", default=[])
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--show-config", action="store_true",
                   help="print the composed, validated config (every default filled in) as YAML and stop")
    add_until_decided_arguments(p)
    add_allow_argument(p)


def until_decided_cost(plan: Plan, budget_s: float, max_repetitions: int) -> str:
    """What ``--until-decided`` may add: more repetitions of the configurations of undecided
    side-by-side pairs, at most ``max_repetitions`` each, no new round after ``budget_s``."""
    from d5pipe.plan.point_config import stage_repetitions

    worst = 0.0
    for stage, sp in plan.stages.items():
        reps = stage_repetitions(plan.config, stage)
        worst += sum(sp.costs) / max(1, reps) * max(0, max_repetitions - reps)
    return (f"until decided: up to {max_repetitions} repetitions of each configuration of an undecided "
            f"side-by-side pair (at most ~{worst:.0f} s of work if every one stayed undecided), no new round "
            f"after {budget_s:.0f} s in all")


def profile_cost(plan: Plan) -> list[str]:
    """With ``profile.enabled``: what the profiled passes add to the timed work (the cost model's
    d5pipe.levels.cost_model.PROFILE_PASS_S a pass)."""
    from d5pipe.levels.cost_model import PROFILE_PASS_S
    from d5pipe.levels.registry import STAGES
    from d5pipe.measure.profile import enabled

    if not enabled(plan.config.get("profile")):
        return []
    passes = sum(len(sp.point_ids) * STAGES[stage].profiled_passes for stage, sp in plan.stages.items()
                 if stage in STAGES)
    work = sum(sum(sp.costs) for sp in plan.stages.values())
    return [f"profile: {passes} profiled passes after the timed ones, ~{passes * PROFILE_PASS_S:.0f} s beside "
            f"~{work:.0f} s of timed work ({PROFILE_PASS_S:g} s a pass, d5pipe.levels.cost_model)"]


def slurm_lines(plan: Plan) -> list[str]:
    """Under ``executor.name: slurm``: the site's limits (read from the cluster) and how the
    stages' shards are submitted under them (d5pipe.execute.slurm_limits)."""
    executor = plan.config.get("executor") or {}
    if executor.get("name") != "slurm":
        return []
    from d5pipe.execute.slurm_limits import plan_lines, read_limits

    return plan_lines({stage: sp.n_shards for stage, sp in plan.stages.items()}, executor, read_limits())


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    apply_allow(args.allow)
    plan = load_plan(args.experiment, args.overrides, args.config_dir, args.executor)
    if args.show_config:
        from d5pipe.core.yamlio import safe_dump

        print(safe_dump(plan.config, sort_keys=False), end="")
        return 0
    run_dir = args.out or default_out(plan)
    summary = summarize(plan, run_dir, time.perf_counter() - t0)
    stale = code_stale(plan, Path(run_dir))
    missing = unavailable(plan)
    slurm = slurm_lines(plan)
    profiled = profile_cost(plan)
    if args.json:
        print(json.dumps({**summary.to_dict(), "stale": stale, "code": sorted(plan.code), "unavailable": missing,
                          "slurm": slurm, "profile": profiled}, indent=1))
    else:
        print(format_summary(summary))
        for line in stale + missing + slurm + profiled:
            print(f"  {line}")
        if args.until_decided:
            print(f"  {until_decided_cost(plan, args.budget, args.max_repetitions)}")
    return 0
