"""``d5pipe profile RUN POINT_ID``: profile one point of a run afterwards (issue 53).

The point runs once more, in this process, with its own config and seed, and a profiled pass after
its timed pass (d5pipe.measure.profile); the record goes to ``profiles/<stage>/<point_id>.json``
(the point's own record is left as it is: its timings stay the run's), its trace beside it, and
the run's results and report are rebuilt so that ``profile.parquet`` and the report's profile
section hold it. User code is imported only where the person running this allowed it, as for
``d5pipe run``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.rundir.layout import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("point_id", help="a point ID of the run (d5pipe status lists them; results.parquet holds them)")
    p.add_argument("--iterations", type=int, default=None,
                   help="calls of the point's function under the profiler (default: the run's profile.iterations)")


def find_point(rd: RunDir, point_id: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(stage, the point's plan entry, its shard's spec), or a one-line error."""
    for stage in rd.stages():
        for shard in rd.shards(stage):
            spec = rd.shard_spec(stage, shard)
            for pt in spec["points"]:
                if pt["point_id"] == point_id:
                    return stage, pt, spec
    raise D5PipeError(f"profile: no point {point_id!r} in {rd.root} (d5pipe status {rd.root} lists its points)")


def main(args: argparse.Namespace) -> int:
    from d5pipe.execute.shard import process_env_hash, run_point_record
    from d5pipe.levels.contract import PointContext, run_closers
    from d5pipe.levels.registry import STAGES
    from d5pipe.measure.profile import ProfileConf
    from d5pipe.plan.point_config import point_config, stage_base
    from d5pipe.provenance.bundle import write_checksums
    from d5pipe.results.profiles import top_operators
    from d5pipe.results.report import build_report
    from d5pipe.results.run_results import build_results, write_results

    rd = RunDir.of(args.run_dir).require_run()
    if args.iterations is not None and args.iterations < 1:
        raise D5PipeError(f"profile: --iterations must be at least 1, not {args.iterations}")
    stage, pt, spec = find_point(rd, args.point_id)
    run_point = STAGES[stage].runner()
    section = {**vars(ProfileConf()), **(rd.config.get("profile") or {}), "enabled": True}
    if args.iterations is not None:
        section["iterations"] = args.iterations
    work = rd.work(stage, args.point_id)
    work.mkdir(parents=True, exist_ok=True)
    cache: dict[str, Any] = {}
    ctx = PointContext(experiment=spec["experiment"], stage=stage, point_id=args.point_id, params=pt["params"],
                       config=point_config(stage_base(rd.config, stage), pt["params"]), seed=int(pt["seed"]),
                       run_dir=rd.root, work_dir=work, data_dir=rd.data_dir, executor=dict(rd.executor),
                       cache=cache, profile=section, profile_dir=rd.profile_dir(stage))
    try:
        rec = run_point_record(ctx, process_env_hash(rd.root), run_point)
    finally:
        run_closers(cache)
    if rec.status != "ok" or not rec.extra.get("profile"):
        raise D5PipeError(f"profile: point {args.point_id} {rec.status}: {rec.error or 'its level gave no profile'}")
    rec.write(rd.profile_record(stage, args.point_id))
    res = build_results(rd)
    write_results(res)
    build_report(res)
    write_checksums(rd.root)  # rebuilt on purpose: re-sealed, as d5pipe report does
    top = top_operators(res.profiles[res.profiles["point_id"] == args.point_id], int(section["top"]))
    for row in top.itertuples():
        print(f"{row.phase:<12} {row.operator:<40} {row.self_per_call_s * 1e6:10.4g} us/call  {100 * row.share:5.1f}%")
    print(f"profile: {rd.profile_record(stage, args.point_id)}; traces under {rd.profile_dir(stage)}; "
          f"{rd.side_table('profile')} and the report rebuilt")
    return 0
