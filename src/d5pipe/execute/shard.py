"""Run one shard: its unfinished points, each in a supervised worker, one record per point.

* A point's record is written atomically as soon as the point is done, so a shard killed at any
  moment resumes at its first point without a record (nothing finished is recomputed).
* Points run in a worker process (d5pipe.execute.supervisor): a point that crashes its process,
  is killed for memory or exceeds ``shards.point_timeout_s`` is recorded ``failed`` with the
  cause, and the shard goes on with its next point.
* Before a point starts, the shard appends its ID to ``shards/<stage>/<shard>.attempts``. A point
  that took its whole shard job down with it (e.g. the job was killed for memory) is therefore
  known on resume: after ``shards.max_attempts`` starts it is recorded ``failed`` instead of
  killing every re-run at the same place. A point whose record found the disk full is taken off
  again (the shard stops with exit 75; the point ran, and runs again on resume).
* Records are written without fsync and synced in one batch before the shard's marker, which is
  what makes a trivial point cost well under a millisecond.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
import traceback
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import sync_files, write_json
from d5pipe.core.errors import DiskFull, is_disk_full
from d5pipe.core.outcome import PointOutcome
from d5pipe.execute.placement import skip_reason
from d5pipe.execute.supervisor import Result, Supervisor
from d5pipe.levels.contract import PointContext, PointSkipped, run_closers
from d5pipe.levels.registry import STAGES
from d5pipe.measure import lockstep
from d5pipe.measure.mllog import MlperfConf
from d5pipe.measure.profile import enabled as profiling
from d5pipe.plan.point_config import point_config, stage_base
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, Record

DISK_FULL_STATUS = "disk full"
"""What the worker answers for a point it could not write: the shard raises DiskFull (exit 75)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@functools.lru_cache(maxsize=8)
def _slurm_ids(job_id: str | None, nodelist: str | None) -> tuple[tuple[str, str | None], ...]:
    """SLURM job ID, node list and cluster name of this process (one squeue call per job at most)."""
    from d5pipe.execute.slurm import slurm_provenance

    return tuple(slurm_provenance().items())


def _provenance() -> dict[str, Any]:
    ids = _slurm_ids(os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID"),
                     os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST"))
    from d5pipe.execute.fork_client import process_start

    return {"hostname": socket.gethostname(), "pid": os.getpid(), **dict(ids), "process_start": process_start()}


def mlperf_section(section: dict[str, Any] | None, cpu: dict[str, Any]) -> dict[str, Any]:
    """The run's ``mlperf`` section with its defaults, an empty ``platform`` filled in: the host's CPU
    model and logical CPUs (``cpu``: the environment record's, d5pipe.measure.mllog)."""
    out = {**asdict(MlperfConf()), **(section or {})}
    if not out["platform"]:
        out["platform"] = f"{cpu['model'] or 'CPU'}, {cpu['logical_cpus']} logical CPUs"
    return out


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

    rd = RunDir.of(run_dir)
    record = environment_record(cache_dir=rd.env_dir / "cache")
    h = env_hash(record)
    path = rd.env_record(h)
    if not path.exists():
        write_json(path, record)
    return h


def run_point_record(ctx: PointContext, env_hash: str, run_point: Any) -> Record:
    """Run one point in this process and build its record; errors become ``failed`` with their text."""
    started = time.time()
    start_iso = _now()
    status = "ok"
    error = None
    outcome = PointOutcome()
    try:
        reason = skip_reason(ctx.config, ctx.executor)
        if reason:
            raise PointSkipped(reason)
        outcome = run_point(ctx)
    except PointSkipped as exc:
        status, error = "skipped", str(exc) or "skipped"
    except DiskFull:
        raise  # not the point's failure: the shard stops, and the point runs again on resume
    except Exception as exc:  # a failing point must not stop the sweep
        if is_disk_full(exc):
            raise
        status = "failed"
        text = str(exc) or (type(exc).__doc__ or "").strip().splitlines()[0]
        error = f"{type(exc).__name__}: {text}"
        outcome.extra["traceback"] = traceback.format_exc()
    prov = _provenance()
    prov.update(started=start_iso, finished=_now(), duration_s=time.time() - started)
    return Record(
        experiment=ctx.experiment, stage=ctx.stage, point_id=ctx.point_id, params=ctx.params,
        seed=ctx.seed, status=status, error=error, metrics=[m.to_dict() for m in outcome.metrics],
        samples=outcome.samples, extra=outcome.extra, env_hash=env_hash, provenance=prov,
    )


def _crash_record(spec: dict[str, Any], stage: str, pt: dict[str, Any], cause: str,
                  env_hash: str, seconds: float) -> Record:
    prov = _provenance()
    prov.update(finished=_now(), duration_s=seconds)
    return Record(experiment=spec["experiment"], stage=stage, point_id=pt["point_id"],
                  params=pt["params"], seed=int(pt["seed"]), status="failed", error=cause,
                  extra={"failure": cause}, env_hash=env_hash, provenance=prov)


def run_shard(run_dir: Path, stage: str, shard: str, marker: Path | None = None) -> dict[str, str]:
    """Run every unfinished point of ``plan/<stage>/<shard>.json``; return point_id -> status."""
    rd = RunDir.of(run_dir)
    spec = rd.shard_spec(stage, shard)
    shards_cfg = rd.config["shards"]  # the composed, checked config: every key is there
    max_attempts = int(shards_cfg["max_attempts"])
    points: list[dict[str, Any]] = list(spec["points"])
    from d5pipe.provenance.environment import prefetch

    prefetch(rd.env_dir / "cache")  # the MPI probe of an uncached record runs while torch is imported
    STAGES[stage].runner()  # the stage's code (torch) first: the record reads its threads
    from d5pipe.execute.fork_client import note_start

    note_start()  # how this process started and how long until the stage's code was in (point records)
    env_hash = process_env_hash(rd.root)
    statuses: dict[str, str] = {}
    written: list[Path] = []
    todo: list[int] = []
    n = len(points)
    attempts = rd.started(stage, shard)
    for k, pt in enumerate(points):
        pid = pt["point_id"]
        done = done_record(rd.record(stage, pid))
        if done is not None:
            statuses[pid] = done.status
            print(f"[{stage}/{shard}] {k + 1}/{n} {pid}: done before, skipped", flush=True)
        elif attempts[pid] >= max_attempts:
            cause = (f"crashed: the point's process died with its shard job in {attempts[pid]} "
                     f"start(s) (shards.max_attempts={max_attempts}); not tried again")
            _crash_record(spec, stage, pt, cause, env_hash, 0.0).write(rd.record(stage, pid), durable=False)
            written.append(rd.record(stage, pid))
            statuses[pid] = "failed"
            print(f"[{stage}/{shard}] {k + 1}/{n} {pid}: failed ({cause})", flush=True)
        else:
            todo.append(k)
    if todo:
        _run_points(rd, spec, stage, shard, todo, env_hash, float(shards_cfg["point_timeout_s"]), statuses, written)
    sync_files(written)
    if marker is not None:
        write_json(marker, {"schema_version": 1, "stage": stage, "shard": shard, "points": statuses})
    return statuses


def _run_points(rd: RunDir, spec: dict[str, Any], stage: str, shard: str, todo: list[int], env_hash: str,
                timeout_s: float, statuses: dict[str, str], written: list[Path]) -> None:
    """The shard's unfinished points, one after the other in a supervised worker process; under
    ``d5pipe ab``, taking turns with the other side's job of this shard (d5pipe.measure.lockstep)."""
    points: list[dict[str, Any]] = list(spec["points"])
    base = stage_base(rd.config, stage)
    executor = dict(rd.executor)
    run_point = STAGES[stage].runner()  # imported once, before the worker is forked
    cache: dict[str, Any] = {}
    profile = rd.config.get("profile") if profiling(rd.config.get("profile")) else None
    from d5pipe.provenance.environment import environment_record

    mlperf = mlperf_section(rd.config.get("mlperf"), environment_record(cache_dir=rd.env_dir / "cache")["cpu"])

    def run_one(k: int) -> str:
        pt = points[k]
        pid = pt["point_id"]
        work = rd.work(stage, pid)
        work.mkdir(parents=True, exist_ok=True)
        ctx = PointContext(
            experiment=spec["experiment"], stage=stage, point_id=pid, params=pt["params"],
            config=point_config(base, pt["params"]), seed=int(pt["seed"]), run_dir=rd.root,
            work_dir=work, data_dir=rd.data_dir, executor=executor, cache=cache,
            profile=profile, profile_dir=rd.profile_dir(stage), mlperf=mlperf, mlperf_dir=rd.mlperf_dir(stage),
        )
        try:
            rec = run_point_record(ctx, env_hash, run_point)
            seen = lockstep.stats()
            if seen is not None:  # under d5pipe ab: what this point saw of the other side
                rec.extra["lockstep"] = seen
            rec.write(rd.record(stage, pid), durable=False)
        except (DiskFull, OSError) as err:
            if isinstance(err, OSError) and not is_disk_full(err):
                raise
            return DISK_FULL_STATUS  # no record, no crash record: the point runs again on resume
        return rec.status

    # under d5pipe ab: wait for the turn before any work; the forked worker takes turns with the
    # other side's job for this shard, block by block
    lockstep.begin(f"{stage}/{shard}", pin=not STAGES[stage].tasks_from_ranks)
    supervisor = Supervisor(run_one, timeout_s, on_exit=lambda: run_closers(cache))
    attempts_log = rd.attempts(stage, shard)
    attempts_log.parent.mkdir(parents=True, exist_ok=True)
    with open(attempts_log, "ab", buffering=0) as log:
        try:
            for k in todo:
                pt = points[k]
                pid = pt["point_id"]
                before = _note_start(log.fileno(), attempts_log, pid)
                result: Result = supervisor.run(k)
                path = rd.record(stage, pid)
                if result.status == DISK_FULL_STATUS:  # measured, only its record found no space:
                    os.ftruncate(log.fileno(), before)  # not a start towards shards.max_attempts
                    raise DiskFull.at(path)
                if result.status in ("crashed", "timeout"):
                    cause = result.detail if result.status == "timeout" else f"crashed: {result.detail}"
                    _crash_record(spec, stage, pt, cause, env_hash, result.seconds).write(path, durable=False)
                    statuses[pid] = "failed"
                else:
                    statuses[pid] = result.status
                written.append(path)
                last = done_record(path)
                msg = f"[{stage}/{shard}] {k + 1}/{len(points)} {pid}: {statuses[pid]}"
                if last is not None and last.error:
                    msg += f" ({last.error.splitlines()[0][:200]})"
                print(msg, flush=True)
        finally:
            supervisor.close()
            lockstep.end()


def _note_start(fd: int, path: Path, point_id: str) -> int:
    """Append ``point_id`` to the attempts log open (``O_APPEND``) at ``fd``, named ``path``; returns
    the log's length before, to take the line back (``os.ftruncate`` needs no space). A full disk
    leaves the log as it was (no half line) and raises DiskFull naming it."""
    before = os.fstat(fd).st_size
    data = (point_id + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError as err:
        os.ftruncate(fd, before)
        if is_disk_full(err):
            raise DiskFull.at(path) from err
        raise
    return before


def main(argv: list[str] | None = None) -> int:
    """``python -m d5pipe.execute.shard RUN_DIR STAGE SHARD [MARKER]`` (used by tests and by hand)."""
    args = list(sys.argv[1:] if argv is None else argv)
    run_dir, stage, shard = Path(args[0]), args[1], args[2]
    marker = Path(args[3]) if len(args) > 3 else None
    run_shard(run_dir, stage, shard, marker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
