"""Run one shard: all its points in one process, each record written atomically when done.

A shard killed at any moment resumes at its first point without a record: records are written
with temp file + rename, so a record either exists whole or not at all.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from d5pipe.config.stages import STAGES, load_target
from d5pipe.levels.contract import PointContext, PointSkipped
from d5pipe.plan.build import point_config, stage_base
from d5pipe.rundir.atomic import write_json
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, PointOutcome, Record


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@functools.lru_cache(maxsize=8)
def _slurm_ids(job_id: str | None, nodelist: str | None) -> tuple[str | None, str | None]:
    """SLURM job ID and node list of this process (one squeue call per job at most)."""
    from d5pipe.execute.slurm import slurm_provenance

    prov = slurm_provenance()
    return prov["slurm_job_id"], prov["slurm_nodelist"]


def _provenance() -> dict[str, Any]:
    job_id, nodelist = _slurm_ids(
        os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID"),
        os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST"),
    )
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "slurm_job_id": job_id,
        "slurm_nodelist": nodelist,
    }


def done_record(path: Path) -> Record | None:
    """The finished record at ``path``, or None when the point must (re)run.

    A missing file or one that does not parse (a torn write by another tool) is recomputed; a
    record of an unknown schema version is a user error (d5pipe.rundir.record).
    """
    try:
        rec = Record.read(path)
    except (FileNotFoundError, CorruptRecord):
        return None
    return rec if rec.status in ("ok", "failed", "skipped") else None


def process_env_hash(run_dir: Path) -> str:
    """This process's env hash; its full record is kept once in ``RUN/env/<hash>.json``."""
    from d5pipe.provenance.environment import env_hash, environment_record

    record = environment_record()
    h = env_hash(record)
    path = RunDir(run_dir).env_record(h)
    if not path.exists():
        write_json(path, record)
    return h


def run_point_record(ctx: PointContext, env_hash: str, runner: Any | None = None) -> Record:
    """Run one point and build its record; errors become ``failed`` with their text."""
    runner = runner or load_target(STAGES[ctx.stage].point)
    started = time.time()
    start_iso = _now()
    status = "ok"
    error = None
    outcome = PointOutcome()
    try:
        outcome = runner(ctx)
    except PointSkipped as exc:
        status, error = "skipped", str(exc) or "skipped"
    except Exception as exc:  # a failing point must not stop the sweep
        status = "failed"
        error = f"{type(exc).__name__}: {exc}"
        outcome.extra["traceback"] = traceback.format_exc()
    prov = _provenance()
    prov.update(started=start_iso, finished=_now(), duration_s=time.time() - started)
    return Record(
        experiment=ctx.experiment, stage=ctx.stage, point_id=ctx.point_id, params=ctx.params,
        seed=ctx.seed, status=status, error=error, metrics=[m.to_dict() for m in outcome.metrics],
        samples=outcome.samples, extra=outcome.extra, env_hash=env_hash, provenance=prov,
    )


def run_shard(run_dir: Path, stage: str, shard: str, marker: Path | None = None) -> dict[str, str]:
    """Run every unfinished point of ``plan/<stage>/<shard>.json``; return point_id -> status."""
    rd = RunDir(run_dir)
    spec = rd.shard_spec(stage, shard)
    base = stage_base(rd.config, stage)
    executor = dict(rd.executor)
    env_hash = process_env_hash(rd.root)
    cache: dict[str, Any] = {}
    statuses: dict[str, str] = {}
    runner = None
    n = len(spec["points"])
    for k, pt in enumerate(spec["points"], 1):
        pid = pt["point_id"]
        path = rd.record(stage, pid)
        done = done_record(path)
        if done is not None:
            statuses[pid] = done.status
            print(f"[{stage}/{shard}] {k}/{n} {pid}: done before, skipped", flush=True)
            continue
        if runner is None:
            runner = load_target(STAGES[stage].point)
        work = rd.work(stage, pid)
        work.mkdir(parents=True, exist_ok=True)
        ctx = PointContext(
            experiment=spec["experiment"],
            stage=stage,
            point_id=pid,
            params=pt["params"],
            config=point_config(base, pt["params"]),
            seed=int(pt["seed"]),
            run_dir=rd.root,
            work_dir=work,
            data_dir=rd.data_dir,
            executor=executor,
            cache=cache,
        )
        rec = run_point_record(ctx, env_hash, runner)
        rec.write(path)
        statuses[pid] = rec.status
        msg = f"[{stage}/{shard}] {k}/{n} {pid}: {rec.status}"
        if rec.error:
            msg += f" ({rec.error.splitlines()[0][:200]})"
        print(msg, flush=True)
    if marker is not None:
        write_json(
            marker,
            {"schema_version": 1, "stage": stage, "shard": shard, "points": statuses},
        )
    return statuses


def main(argv: list[str] | None = None) -> int:
    """``python -m d5pipe.execute.shard RUN_DIR STAGE SHARD [MARKER]`` (used by tests and by hand)."""
    args = list(sys.argv[1:] if argv is None else argv)
    run_dir, stage, shard = Path(args[0]), args[1], args[2]
    marker = Path(args[3]) if len(args) > 3 else None
    run_shard(run_dir, stage, shard, marker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
