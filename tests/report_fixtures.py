"""Realistic synthetic run directories for the aggregate and report tests (and the benchmark).

The records follow the record format of docs/architecture.md exactly (schema_version 1). Values are
drawn from a seeded ``random.Random`` so a fixture is the same on every call; they are synthetic
test inputs, not measurements, and are never presented as such.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from d5pipe.core.atomic import write_json, write_text
from d5pipe.core.seeds import point_seed
from d5pipe.rundir.record import read_record, write_record

HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'
"""User text that must come out escaped in every report."""

ENV_HASH = "e3b0c44298fc1c14"


@dataclass
class RunSpec:
    """What to put in a synthetic run directory."""

    experiment: str = "synthetic"
    levels: tuple[str, ...] = ("level0", "level1", "level2", "level3")
    failed: int = 1
    """How many points of the first level fail (with a hostile error text)."""
    skipped: int = 0
    hostile: bool = True
    """Put :data:`HOSTILE` into config values, params and warnings."""
    reproduce: bool = True
    root_seed: int = 1234
    extra_config: dict[str, Any] = field(default_factory=dict)
    grids: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """Per-stage grid overrides (replace :data:`GRIDS` of that stage)."""
    acceptance: float | None = 0.9
    """``recipe.acceptance`` threshold on level-2 ``final_test_accuracy`` (None: no recipe)."""


def _pid(stage: str, i: int) -> str:
    return f"{stage[-1]}{i:07d}abcdef"[:16]


def _timing_metric(
    rng: random.Random, name: str, center: float, key: str, n: int = 15
) -> tuple[dict[str, Any], list[float]]:
    samples = sorted(center * (1.0 + abs(rng.gauss(0.0, 0.03))) for _ in range(n))
    med = statistics.median(samples)
    metric = {
        "name": name,
        "value": med,
        "unit": "s",
        "kind": "timing",
        "ci_low": samples[max(0, n // 2 - 3)],
        "ci_high": samples[min(n - 1, n // 2 + 3)],
        "samples": key,
    }
    return metric, samples


def _m(name: str, value: Any, unit: str = "", kind: str = "numerical", **ci: float) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "kind": kind,
        "ci_low": ci.get("lo"),
        "ci_high": ci.get("hi"),
        "samples": None,
    }


def level0_outcome(rng: random.Random, params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[float]], dict[str, Any]]:
    """Metrics, samples and extra of a matmul point (n x n x n)."""
    n = int(params.get("operators.size", 128))
    impl_factor = {"eager": 1.0, "compiled": 0.7, "naive": 5.0}.get(str(params.get("operators.impl")), 1.0)
    flops = 2.0 * n**3
    nbytes = 3.0 * n * n * 4
    peak_gflops = 80.0
    peak_gbps = 20.0
    t_ideal = max(flops / (peak_gflops * 1e9), nbytes / (peak_gbps * 1e9))
    time_m, samples = _timing_metric(rng, "time", t_ideal * impl_factor * 1.6, "time")
    gflops = flops / time_m["value"] / 1e9
    metrics = [
        time_m,
        _m("gflops", gflops, "GFLOP/s", lo=flops / time_m["ci_high"] / 1e9, hi=flops / time_m["ci_low"] / 1e9),
        _m("gbps", nbytes / time_m["value"] / 1e9, "GB/s"),
        _m("flops", flops, "FLOP", "deterministic"),
        _m("bytes", nbytes, "B", "deterministic"),
        _m("pct_peak_flops", 100.0 * gflops / peak_gflops, "%"),
        _m("peak_gflops", peak_gflops, "GFLOP/s", "info"),
        _m("peak_gbps", peak_gbps, "GB/s", "info"),
        _m("err_max_rel", abs(rng.gauss(0, 1e-6)), "", "numerical"),
        _m("correct", "pass" if impl_factor < 4 else "fail", "", "verdict"),
        _m("target_met", impl_factor < 4, "", "info"),
    ]
    return metrics, {"time": samples}, {}


def level1_outcome(rng: random.Random, params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[float]], dict[str, Any]]:
    bs = int(params.get("level1.batch_size", 32))
    impl_factor = {"eager": 1.0, "compile": 0.8}.get(str(params.get("level1.impl")), 1.0)
    lat_m, samples = _timing_metric(rng, "inference_latency", 1e-4 * bs**0.8 * impl_factor, "inference_latency")
    thr = bs / lat_m["value"]
    metrics = [
        lat_m,
        _m("inference_latency_iqr", lat_m["value"] * (0.25 if bs == 8 else 0.02), "s", "info"),
        _m("throughput", thr, "samples/s", lo=bs / lat_m["ci_high"], hi=bs / lat_m["ci_low"]),
        _m("train_throughput", thr / 3.0, "samples/s"),
        _m("peak_memory", 1e6 * bs, "B", "info"),
    ]
    return metrics, {"inference_latency": samples}, {}


def level2_outcome(rng: random.Random, params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[float]], dict[str, Any]]:
    epochs = list(range(1, 7))
    lr = float(params.get("train.lr", 0.003))
    opt_factor = {"sgd": 1.0, "adam": 1.25}.get(str(params.get("train.optimizer")), 1.0)
    loss = [2.3 * (0.6 + lr * 20) ** e for e in epochs]
    acc = [min(0.99, 0.5 + 0.08 * e + rng.uniform(0, 0.01)) for e in epochs]
    step_m, samples = _timing_metric(rng, "step_time", 2e-3 * opt_factor, "step_time_s", n=40)
    metrics = [
        step_m,
        _m("time_to_target_s", 1.5 + rng.uniform(0, 0.5), "s", "timing"),
        _m("samples_per_s", 5000 + rng.uniform(0, 100), "samples/s", "timing"),
        _m("final_test_accuracy", acc[-1], "", "numerical"),
        _m("weights_sha256", "9f86d081884c7d65", "", "deterministic"),
    ]
    extra = {
        "curves": {"epoch": epochs, "train_loss": loss, "test_accuracy": acc},
        "warnings": ["loss curve is noisy"] if lr > 0.005 else [],
    }
    return metrics, {"step_time_s": samples}, extra


def level3_outcome(rng: random.Random, params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[float]], dict[str, Any]]:
    ranks = int(params.get("distributed.ranks", 1))
    msg = int(params.get("distributed.message_bytes", 1024))
    base = 0.02 * {"ddp": 1.0, "mpi": 1.1}.get(str(params.get("distributed.backend")), 1.0)
    t_m, samples = _timing_metric(rng, "time_per_step_s", base / ranks * (1 + 0.15 * (ranks - 1)), "step_times")
    metrics = [  # speedup/efficiency are cross-point: the report derives them (distributed.scaling)
        t_m,
        _m("busbw_GBps", msg / 1e9 / (1e-5 + msg / 5e9) * 2 * (ranks - 1) / max(ranks, 1), "GB/s"),
        _m("algbw_GBps", msg / 1e9 / (1e-5 + msg / 5e9), "GB/s"),
        _m("bytes_per_rank", 2.0 * msg * (ranks - 1) / max(ranks, 1), "B", "deterministic"),
        _m("oversubscribed", ranks > 2, "", "info"),
    ]
    return metrics, {"step_times": samples}, {"warnings": ["ranks exceed cores"] if ranks > 2 else []}


OUTCOMES = {"level0": level0_outcome, "level1": level1_outcome, "level2": level2_outcome, "level3": level3_outcome}

GRIDS: dict[str, dict[str, list[Any]]] = {
    "level0": {"operators.size": [32, 64, 128, 256], "operators.impl": ["eager", "compiled", "naive"]},
    "level1": {"level1.batch_size": [8, 16, 64], "model.name": ["mlp", "cnn"], "level1.impl": ["eager", "compile"]},
    "level2": {"train.lr": [0.001, 0.003, 0.01]},
    "level3": {
        "distributed.ranks": [1, 2, 4],
        "distributed.backend": ["ddp", "mpi"],
        "distributed.message_bytes": [1024, 1048576],
    },
}


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of ``grid`` as a list of ``{axis: value}``."""
    points: list[dict[str, Any]] = [{}]
    for key, values in grid.items():
        points = [{**p, key: v} for p in points for v in values]
    return points


def make_record(
    experiment: str, stage: str, point_id: str, params: dict[str, Any], seed: int, rng: random.Random
) -> dict[str, Any]:
    """One ``ok`` record of ``stage`` with realistic metrics."""
    metrics, samples, extra = OUTCOMES[stage](rng, params)
    return {
        "schema_version": 1,
        "experiment": experiment,
        "stage": stage,
        "point_id": point_id,
        "params": params,
        "seed": seed,
        "status": "ok",
        "error": None,
        "metrics": metrics,
        "samples": samples,
        "extra": extra,
        "env_hash": ENV_HASH,
        "provenance": {
            "hostname": "node001",
            "pid": 4242,
            "started": "2025-01-01T00:00:00Z",
            "finished": "2025-01-01T00:00:01Z",
            "duration_s": 1.0,
            "slurm_job_id": None,
            "slurm_nodelist": None,
        },
    }


def fail_record(rec: dict[str, Any], status: str, error: str) -> dict[str, Any]:
    """Turn an ok record into a failed/skipped one (no metrics, error text kept)."""
    return {**rec, "status": status, "error": error, "metrics": [], "samples": {}, "extra": {}}


def make_run_dir(run_dir: Path, spec: RunSpec | None = None) -> dict[str, list[str]]:
    """Write records, manifest.json, config.yaml (and reproduce.json) under ``run_dir``.

    Returns the planned point IDs per stage.
    """
    spec = spec or RunSpec()
    rng = random.Random(7)
    planned: dict[str, list[str]] = {}
    seeds: dict[str, dict[str, int]] = {}
    for stage in spec.levels:
        grid = dict(spec.grids.get(stage, GRIDS[stage]))
        if spec.hostile and stage == spec.levels[0]:
            text_axes = [k for k, vs in grid.items() if all(isinstance(v, str) for v in vs)]
            if text_axes:
                grid[text_axes[0]] = [*grid[text_axes[0]], HOSTILE]
        ids: list[str] = []
        for i, params in enumerate(grid_points(grid)):
            pid = _pid(stage, i)
            seed = point_seed(spec.root_seed, stage, pid)
            rec = make_record(spec.experiment, stage, pid, params, seed, rng)
            if stage == spec.levels[0] and i < spec.failed:
                rec = fail_record(rec, "failed", f"RuntimeError: boom {i} {HOSTILE}")
            elif stage == spec.levels[0] and i < spec.failed + spec.skipped:
                rec = fail_record(rec, "skipped", "fp16 unsupported on this CPU")
            write_record(run_dir / "points" / stage / f"{pid}.json", rec)
            ids.append(pid)
            seeds.setdefault(stage, {})[pid] = seed
        planned[stage] = ids
    config = {
        "name": spec.experiment,
        "description": HOSTILE if spec.hostile else "synthetic run",
        "seed": spec.root_seed,
        "stages": list(spec.levels),
        **spec.extra_config,
    }
    if spec.acceptance is not None and "level2" in spec.levels:
        config.setdefault("recipe", {"acceptance": [
            {"metric": "final_test_accuracy", "op": ">=", "value": spec.acceptance, "stage": "level2"}]})
    write_text(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    write_json(
        run_dir / "manifest.json",
        {
            "schema_version": 1,
            "experiment": spec.experiment,
            "config_hash": "c0ffee",
            "seed": spec.root_seed,
            "seeds": seeds,
            "environment": {"python": "3.11", "torch": "2.13.0", "hostname": "node001", "note": HOSTILE},
            "env_hash": ENV_HASH,
            "d5pipe_version": "0.1.0",
            "created": "2025-01-01T00:00:00Z",
        },
    )
    if spec.reproduce:
        write_json(
            run_dir / "reproduce.json",
            {"schema_version": 1, "reproduced": False, "verdict": "not reproduced", "metrics": [
                {"stage": "level0", "metric": "time", "verdict": "differs"}]},
        )
    return planned


def scale_point_time(run_dir: Path, stage: str, params: dict[str, Any], metric: str, factor: float) -> str:
    """Multiply ``metric`` (median, CI and raw samples) of the point with ``params`` by ``factor``.

    Returns the point ID. Used to construct implausible results (e.g. a superlinear speedup).
    """
    for path in sorted((run_dir / "points" / stage).glob("*.json")):
        rec = read_record(path)
        if all(rec["params"].get(k) == v for k, v in params.items()):
            for m in rec["metrics"]:
                if m["name"] == metric:
                    for key in ("value", "ci_low", "ci_high"):
                        m[key] = m[key] * factor
                    if m.get("samples"):
                        rec["samples"][m["samples"]] = [x * factor for x in rec["samples"][m["samples"]]]
            write_record(path, rec)
            return str(rec["point_id"])
    raise KeyError(f"no {stage} point with {params}")


def superlinear_run(run_dir: Path, speedup: float = 12.8) -> str:
    """A level-3 run (ddp, 1 and 2 ranks) whose 2-rank point is ``speedup`` x faster than 1 rank.

    Impossible on 2 ranks: the plausibility check must fail it. Returns the 2-rank point ID.
    """
    make_run_dir(run_dir, RunSpec(levels=("level3",), failed=0, hostile=False, reproduce=False, grids={
        "level3": {"distributed.ranks": [1, 2], "distributed.backend": ["ddp"],
                   "distributed.message_bytes": [1024]}}))
    times = {}
    for path in (run_dir / "points" / "level3").glob("*.json"):
        rec = read_record(path)
        times[rec["params"]["distributed.ranks"]] = next(
            m["value"] for m in rec["metrics"] if m["name"] == "time_per_step_s")
    return scale_point_time(run_dir, "level3", {"distributed.ranks": 2}, "time_per_step_s",
                            times[1] / speedup / times[2])


def write_bulk_records(
    run_dir: Path, n_points: int, stages: Iterable[str] = ("level0",), seed: int = 0
) -> int:
    """Write ``n_points`` level records fast (plain writes, no fsync) for the benchmark.

    Uses the same serialisation as ``d5pipe.core.atomic.write_json``. Returns the number of
    metric rows these records hold.
    """
    rng = random.Random(seed)
    stages = list(stages)
    rows = 0
    for stage in stages:
        (run_dir / "points" / stage).mkdir(parents=True, exist_ok=True)
    grid = GRIDS["level0"]
    sizes, impls = grid["operators.size"], grid["operators.impl"]
    for i in range(n_points):
        stage = stages[i % len(stages)]
        pid = f"{i:016x}"
        params = {"operators.size": sizes[i % len(sizes)], "operators.impl": impls[i % len(impls)],
                  "operators.batch": i // 12}
        rec = make_record("bench", stage, pid, params, i, rng)
        rec["stage"] = stage
        rows += len(rec["metrics"])
        text = json.dumps(rec, indent=1, sort_keys=True, default=str) + "\n"
        (run_dir / "points" / stage / f"{pid}.json").write_text(text, encoding="utf-8")
    return rows


def publish(run_dir: Path, point_ids: dict[str, list[str]] | None = None) -> Path:
    """The run's results built and written in one pass (d5pipe.results.run_results): results.parquet."""
    from d5pipe.results.run_results import build_results, write_results

    return write_results(build_results(run_dir, point_ids=point_ids))
