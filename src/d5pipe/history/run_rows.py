"""What one finished run contributes to the history: a row for the run (where, when, on what
machine and environment, with which user code) and a row per (configuration, repetition, metric)
for its numeric results.

A series is identified without the environment: experiment, stage and the hash of the point's
resolved config with the ``repeat`` axis aside (:func:`series_key`), so the same configuration run
again -- after a package update, on another node, with other threads, with edited user code --
continues its series, while a point that computes something else (another value of any key it
reads, swept or not) starts its own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.atomic import read_json
from d5pipe.core.canonical import canonical_json
from d5pipe.core.errors import D5PipeError
from d5pipe.plan.point_config import REPEAT_AXIS
from d5pipe.results.columns import axis_columns, is_missing, load_results, row_params
from d5pipe.rundir.layout import RunDir

if TYPE_CHECKING:
    import pandas as pd

RUN_COLUMNS = ("run_id", "experiment", "created", "run_dir", "hostname", "machine", "env_hash",
               "d5pipe_version", "git_commit", "packages", "user_code", "config", "slurm_jobs", "slurm_nodes",
               "slurm_cluster", "imported")
RESULT_COLUMNS = ("run_id", "experiment", "stage", "series", "params", "point_id", "repeat", "metric",
                  "unit", "kind", "value", "ci_low", "ci_high", "status", "record")
PROFILE_COLUMNS = ("run_id", "series", "point_id", "phase", "operator", "self_per_call_s")
"""A profiled point's operators (d5pipe.results.profiles.by_operator), under the point's series."""


def stage_config(config: dict[str, Any], stage: str) -> dict[str, Any] | None:
    """What ``stage`` reads of a run's ``config`` (d5pipe.plan.point_config.stage_base); None for a
    stage this d5pipe does not know, or a run without its config."""
    from d5pipe.levels.registry import STAGES
    from d5pipe.plan.point_config import stage_base

    return stage_base(config, stage) if stage in STAGES and config else None


def series_key(experiment: str, stage: str, params: dict[str, Any], base: dict[str, Any] | None) -> str:
    """16 hex digits naming a configuration across runs (its repetitions together): the point's
    resolved config (its stage's ``base``, :func:`stage_config`, with ``params`` set), not the user
    code's source nor where it ran. Without a base it is named by its parameters."""
    from d5pipe.plan.point_config import point_config

    point = point_config(base, params) if base is not None else {"params": params}
    text = canonical_json({"experiment": experiment, "stage": stage, "config": point})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def machine_fingerprint(environment: dict[str, Any]) -> str:
    """12 hex digits of the hardware a run measured on (CPU model, cores, flags, GPUs, architecture):
    the same node type gives the same fingerprint whatever its hostname."""
    cpu = environment.get("cpu") or {}
    hw = {"cpu": {k: cpu.get(k) for k in ("model", "logical_cpus", "physical_cores", "sockets", "flags")},
          "gpu": environment.get("gpu"), "arch": (environment.get("os") or {}).get("machine")}
    return hashlib.sha256(canonical_json(hw).encode()).hexdigest()[:12]


def _user_code(run_dir: Path) -> dict[str, str]:
    code = run_dir / "code"
    if not code.is_dir():
        return {}
    return {str(p.relative_to(code)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(code.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def run_rows(run_dir: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The run's row and its result rows (a finished run: manifest.json and results.parquet)."""
    import pandas as pd

    rd = RunDir.of(run_dir)
    if not rd.manifest_path.is_file():
        raise D5PipeError(f"{run_dir}: no manifest.json (not a finished d5pipe run)")
    manifest = rd.manifest
    results = load_results(run_dir)
    env = manifest.get("environment") or {}
    created = str(manifest.get("created") or "")
    config = manifest.get("config") or {}
    run_id = hashlib.sha256(f"{manifest.get('config_hash')}|{created}|{manifest.get('env_hash')}".encode()
                            ).hexdigest()[:16]
    jobs = sorted({str(j) for j in results.get("slurm_job_id", pd.Series(dtype=str)).dropna().unique()})
    where = [_slurm_where(r) for r in rd.points_dir.glob("*/*.json")] if jobs else []
    nodes = sorted({n for n, _ in where if n})
    clusters = sorted({c for _, c in where if c})
    run = {"run_id": run_id, "experiment": str(manifest.get("experiment") or ""), "created": created,
           "run_dir": str(Path(run_dir).resolve()), "hostname": str(env.get("hostname") or ""),
           "machine": machine_fingerprint(env), "env_hash": str(manifest.get("env_hash") or ""),
           "d5pipe_version": str(manifest.get("d5pipe_version") or ""),
           "git_commit": str((env.get("git") or {}).get("commit") or ""),
           "packages": json.dumps(env.get("packages") or {}, sort_keys=True),
           "user_code": json.dumps(_user_code(Path(run_dir)), sort_keys=True),
           "config": json.dumps(config, sort_keys=True, default=str),
           "slurm_jobs": ",".join(jobs), "slurm_nodes": ",".join(nodes), "slurm_cluster": ",".join(clusters)}
    bases: dict[str, dict[str, Any] | None] = {}  # per stage, once: not once per point
    axes = [c for c in axis_columns(results) if c != REPEAT_AXIS]
    num = results[pd.to_numeric(results["value"], errors="coerce").notna()]
    out = []
    for (stage, pid), grp in num.groupby(["stage", "point_id"], sort=False):
        first = grp.iloc[0]
        params = row_params(first, axes)
        rep = first[REPEAT_AXIS] if REPEAT_AXIS in grp.columns and not is_missing(first[REPEAT_AXIS]) else 0
        if str(stage) not in bases:
            bases[str(stage)] = stage_config(config, str(stage))
        key = series_key(run["experiment"], str(stage), params, bases[str(stage)])
        for r in grp.itertuples(index=False):
            row = r._asdict()
            out.append({"run_id": run_id, "experiment": run["experiment"], "stage": str(stage), "series": key,
                        "params": canonical_json(params), "point_id": str(pid), "repeat": int(rep),
                        "metric": str(row["metric"]), "unit": str(row.get("unit") or ""),
                        "kind": str(row.get("kind") or ""), "value": float(row["value"]),
                        "ci_low": _float(row.get("ci_low")), "ci_high": _float(row.get("ci_high")),
                        "status": str(row.get("status") or ""), "record": f"points/{stage}/{pid}.json"})
    return run, pd.DataFrame(out, columns=list(RESULT_COLUMNS))


def _slurm_where(record: Path) -> tuple[str, str]:
    """(node list, cluster name) of the SLURM job that wrote a point record ("" where none)."""
    prov = read_json(record, {}).get("provenance") or {}
    return str(prov.get("slurm_nodelist") or ""), str(prov.get("slurm_cluster") or "")


def _float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def profile_rows(run_dir: Path, run_id: str, results: pd.DataFrame) -> pd.DataFrame:
    """Each profiled point's operators with their self seconds per call (the median over its profiled
    repetitions and ranks), under the point's series (``results``: :func:`run_rows`'s rows); none
    without a ``profile.parquet``."""
    import pandas as pd

    from d5pipe.results.profile_changes import read_profiles
    from d5pipe.results.profiles import by_operator

    ops = by_operator(read_profiles(run_dir))
    if ops.empty or results.empty:
        return pd.DataFrame(columns=list(PROFILE_COLUMNS))
    series = results.drop_duplicates(["stage", "point_id"])[["stage", "point_id", "series"]]
    return ops.merge(series, on=["stage", "point_id"]).assign(run_id=run_id)[list(PROFILE_COLUMNS)]
