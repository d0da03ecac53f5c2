"""Run one shard: all its points in one process, each record written atomically when done.

A shard killed at any moment resumes at its first point without a record: records are written
with temp file + rename, so a record either exists whole or not at all.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from d5pipe.atomic import write_json
from d5pipe.plan import point_config, stage_base
from d5pipe.records import (
    PointContext,
    PointOutcome,
    PointSkipped,
    read_record,
    record_path,
    write_record,
)
from d5pipe.stages import get_runner


def load_config(run_dir: Path) -> dict[str, Any]:
    with open(run_dir / "config.yaml", encoding="utf-8") as fh:
        data: dict[str, Any] = yaml.safe_load(fh)
    return data


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@functools.lru_cache(maxsize=8)
def _slurm_ids(job_id: str | None, nodelist: str | None) -> tuple[str | None, str | None]:
    """SLURM job ID and node list of this process (one squeue call per job at most)."""
    from d5pipe.slurm import slurm_provenance

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


def _is_done(path: Path) -> bool:
    """A record counts as done when it parses; anything else is recomputed."""
    try:
        rec = read_record(path)
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return rec.get("status") in ("ok", "failed", "skipped")


def process_env_hash(run_dir: Path) -> str:
    """This process's env hash; its full record is kept once in ``RUN/env/<hash>.json``."""
    from d5pipe.envinfo import env_hash, environment_record

    record = environment_record()
    h = env_hash(record)
    path = Path(run_dir) / "env" / f"{h}.json"
    if not path.exists():
        write_json(path, record)
    return h


def run_point_record(
    ctx: PointContext, env_hash: str, runner: Any | None = None
) -> dict[str, Any]:
    """Run one point and build its record; errors become ``failed`` with their text."""
    runner = runner or get_runner(ctx.stage)
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
    return {
        "experiment": ctx.experiment,
        "stage": ctx.stage,
        "point_id": ctx.point_id,
        "params": ctx.params,
        "seed": ctx.seed,
        "status": status,
        "error": error,
        "metrics": [m.to_dict() for m in outcome.metrics],
        "samples": outcome.samples,
        "extra": outcome.extra,
        "env_hash": env_hash,
        "provenance": prov,
    }


def run_shard(run_dir: Path, stage: str, shard: str, marker: Path | None = None) -> dict[str, str]:
    """Run every unfinished point of ``plan/<stage>/<shard>.json``; return point_id -> status."""
    run_dir = Path(run_dir)
    with open(run_dir / "plan" / stage / f"{shard}.json", encoding="utf-8") as fh:
        spec = json.load(fh)
    config = load_config(run_dir)
    base = stage_base(config, stage)
    executor = dict(config.get("executor", {}))
    env_hash = process_env_hash(run_dir)
    cache: dict[str, Any] = {}
    statuses: dict[str, str] = {}
    runner = None
    n = len(spec["points"])
    for k, pt in enumerate(spec["points"], 1):
        pid = pt["point_id"]
        path = record_path(run_dir, stage, pid)
        if _is_done(path):
            statuses[pid] = read_record(path)["status"]
            print(f"[{stage}/{shard}] {k}/{n} {pid}: done before, skipped", flush=True)
            continue
        if runner is None:
            runner = get_runner(stage)
        work = run_dir / "work" / stage / pid
        work.mkdir(parents=True, exist_ok=True)
        ctx = PointContext(
            experiment=spec["experiment"],
            stage=stage,
            point_id=pid,
            params=pt["params"],
            config=point_config(base, pt["params"]),
            seed=int(pt["seed"]),
            run_dir=run_dir,
            work_dir=work,
            data_dir=run_dir / "data",
            executor=executor,
            cache=cache,
        )
        rec = run_point_record(ctx, env_hash, runner)
        write_record(path, rec)
        statuses[pid] = rec["status"]
        msg = f"[{stage}/{shard}] {k}/{n} {pid}: {rec['status']}"
        if rec["error"]:
            msg += f" ({rec['error'].splitlines()[0][:200]})"
        print(msg, flush=True)
    if marker is not None:
        write_json(
            marker,
            {"schema_version": 1, "stage": stage, "shard": shard, "points": statuses},
        )
    return statuses


def main(argv: list[str] | None = None) -> int:
    """``python -m d5pipe.shard RUN_DIR STAGE SHARD [MARKER]`` (used by tests and by hand)."""
    args = list(sys.argv[1:] if argv is None else argv)
    run_dir, stage, shard = Path(args[0]), args[1], args[2]
    marker = Path(args[3]) if len(args) > 3 else None
    run_shard(run_dir, stage, shard, marker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
