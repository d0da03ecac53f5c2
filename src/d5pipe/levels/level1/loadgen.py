"""A level-1 point under MLCommons LoadGen (``level1.scenario`` other than ``none``).

The point's runtime -- the same prepared callable d5pipe's timer measures (PyTorch eager or
compiled, ONNX Runtime, OpenVINO, a user runtime) -- is LoadGen's system under test:

* the query sample library (QSL) is the point's input batches, already in memory: a LoadGen
  *sample* is one batch of ``level1.batch_size`` (every runtime runs the batch shape it was
  prepared for), and a query's sample index picks the batch;
* the SUT's ``issue_queries`` (called from LoadGen's own thread) runs the samples one after another
  through the runtime (device synchronised) and calls ``lg.QuerySamplesComplete`` for each, in that
  thread: one server, no hand-over to another Python thread (whose wake-ups under the GIL cost more
  than a small network's call); LoadGen times a server query from its scheduled start, so a query
  that waits behind another counts its wait; ``offline``'s one query of many samples is its batches
  in turn;
* before LoadGen starts, a short calibration times a few calls (the first one, which may compile,
  left out): its median ``L`` sizes LoadGen's expectations (single_stream ``L``, multi_stream
  ``samples_per_query x L``, offline ``2 / L`` QPS, server ``0.5 / L`` QPS) where the config leaves
  ``level1.loadgen_target_qps`` at 0;
* LoadGen's seeds (QSL, sample index, schedule) derive from the point's seed; its settings (minimum
  and maximum duration, minimum query count, percentile, latency bound) come from ``level1``.

LoadGen writes ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` into
``ctx.mlperf_dir/<point_id>/`` (the point's work directory where there is none); the point's
metrics are read back from the detail log's ``:::MLLOG`` lines: ``loadgen_valid`` (LoadGen's
``result_validity``, its reasons as the verdict's detail), latency percentiles in seconds and its
rate. ``server`` with ``level1.loadgen_find_peak_qps`` then bisects for the highest QPS whose run
is valid (each probe a LoadGen run in ``peak_qps/probe_<k>/``) and reports it as ``loadgen_peak_qps``.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from d5pipe.core.outcome import Metric
from d5pipe.core.seeds import derive_seed
from d5pipe.levels.contract import PointContext
from d5pipe.levels.level1.metrics import metric
from d5pipe.levels.level1.schema import Level1Conf

LG_SCENARIOS = {"single_stream": "SingleStream", "multi_stream": "MultiStream", "offline": "Offline",
                "server": "Server"}
"""``level1.scenario`` -> LoadGen's ``TestScenario`` name."""
PERCENTILES = {"loadgen_latency_p50": "50.00", "loadgen_latency_p90": "90.00", "loadgen_latency_p99": "99.00"}
"""Metric -> the percentile of LoadGen's ``result_<p>_percentile_latency_ns``."""
RATE_KEYS = {"single_stream": "result_qps_with_loadgen_overhead", "server": "result_completed_samples_per_sec",
             "offline": "result_samples_per_second"}
"""Where LoadGen's detail log keeps each scenario's rate (multi_stream reports none)."""
CONDITIONS = {"result_min_duration_met": "minimum duration not met", "result_min_queries_met":
              "minimum query count not met", "early_stopping_met": "early stopping not satisfied",
              "result_perf_constraints_met": "latency bound not met"}
CALIBRATION_CALLS = 3
CALIBRATION_S = 0.1
CALIBRATION_MAX_CALLS = 1000
OFFLINE_HEADROOM = 2.0
"""Offline expects this much more than the calibrated rate, so that its one query lasts the minimum duration."""
SERVER_START = 0.5
"""Server's QPS, as a fraction of the calibrated rate, when ``loadgen_target_qps`` is 0."""
PEAK_CEILING = 1.1
"""The peak search's upper bound as a multiple of the calibrated rate: one worker never serves more
than ``1 / L`` batches a second."""
BENIGN = ("Logging allocation detected",)
"""LoadGen's warnings that say nothing about the run (its log grew a thread's buffer), left out."""
Infer = Callable[[Any], object]


def calibrate(infer: Infer, batches: Sequence[Any]) -> float:
    """Median seconds of one batch's call: a first call (warm-up, compilation) left out, then calls
    over the QSL's batches for at least :data:`CALIBRATION_S` and :data:`CALIBRATION_CALLS` calls
    (at most :data:`CALIBRATION_MAX_CALLS`)."""
    infer(batches[0])
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < CALIBRATION_MAX_CALLS and (
            len(times) < CALIBRATION_CALLS or time.perf_counter() - start < CALIBRATION_S):
        t0 = time.perf_counter()
        infer(batches[len(times) % len(batches)])
        times.append(time.perf_counter() - t0)
    return max(statistics.median(times), 1e-7)


def settings(conf: Level1Conf, scenario: str, latency_s: float, seed: int, target_qps: float | None = None) -> dict[str, Any]:
    """The LoadGen ``TestSettings`` of one run, as ``{attribute: value}`` (recorded as told)."""
    qps = target_qps if target_qps is not None else conf.loadgen_target_qps
    pct = conf.loadgen_percentile / 100.0
    out: dict[str, Any] = {
        "scenario": LG_SCENARIOS[scenario], "mode": "PerformanceOnly",
        "min_duration_ms": max(1, round(conf.loadgen_min_duration_s * 1000)),
        "max_duration_ms": max(1, round(conf.loadgen_max_duration_s * 1000)),
        "min_query_count": conf.loadgen_min_query_count,
        "qsl_rng_seed": derive_seed(seed, "loadgen-qsl"), "sample_index_rng_seed": derive_seed(seed, "loadgen-index"),
        "schedule_rng_seed": derive_seed(seed, "loadgen-schedule")}
    if scenario == "single_stream":
        out |= {"single_stream_expected_latency_ns": max(1, round(latency_s * 1e9)),
                "single_stream_target_latency_percentile": pct}
    elif scenario == "multi_stream":
        out |= {"multi_stream_samples_per_query": conf.loadgen_samples_per_query,
                "multi_stream_expected_latency_ns": max(1, round(latency_s * conf.loadgen_samples_per_query * 1e9)),
                "multi_stream_target_latency_percentile": pct}
    elif scenario == "offline":
        out["offline_expected_qps"] = qps or OFFLINE_HEADROOM / latency_s
    else:
        out |= {"server_target_qps": qps or SERVER_START / latency_s,
                "server_target_latency_ns": max(1, round(conf.loadgen_target_latency_ms * 1e6)),
                "server_target_latency_percentile": pct}
    return out


class _Sut:
    """The system under test: LoadGen's ``issue_queries`` runs the samples' batches in order, in
    LoadGen's own thread, and completes each as it is done."""

    def __init__(self, infer: Infer, batches: Sequence[Any]) -> None:
        self.infer, self.batches = infer, batches
        self.error: BaseException | None = None

    def issue(self, samples: list[Any]) -> None:
        import mlperf_loadgen as lg

        for sample in samples:
            if self.error is None:
                try:
                    self.infer(self.batches[sample.index])
                except BaseException as exc:  # noqa: BLE001 - raised after the test; LoadGen must not wait
                    self.error = exc
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])


def run_loadgen(infer: Infer, batches: Sequence[Any], told: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """One LoadGen test of ``infer`` over ``batches`` with the settings ``told``; its logs go into
    ``out_dir`` (emptied first). Returns the detail log's figures (:func:`read_detail`)."""
    import mlperf_loadgen as lg

    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    test = lg.TestSettings()
    for name, value in told.items():
        setattr(test, name, getattr(lg.TestScenario, value) if name == "scenario" else
                getattr(lg.TestMode, value) if name == "mode" else value)
    test.performance_sample_count_override = len(batches)
    output = lg.LogOutputSettings()
    output.outdir = str(out_dir)
    output.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = False
    sut_impl = _Sut(infer, batches)
    sut = lg.ConstructSUT(sut_impl.issue, lambda: None)
    qsl = lg.ConstructQSL(len(batches), len(batches), lambda _: None, lambda _: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, test, log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    if sut_impl.error is not None:
        raise RuntimeError(f"the runtime failed under LoadGen: {sut_impl.error}") from sut_impl.error
    return read_detail(out_dir / "mlperf_log_detail.txt")


def read_detail(path: Path) -> dict[str, Any]:
    """LoadGen's detail log (its lines read by d5pipe.measure.mllog_check.parse_log; one that does not
    parse is left out) as ``{key: value}`` (the last line of a key wins) plus ``errors`` and
    ``warnings``: the values of its lines flagged ``is_error`` / ``is_warning``."""
    from d5pipe.measure.mllog_check import parse_log  # not at import: the level registry imports this module

    out: dict[str, Any] = {"errors": [], "warnings": []}
    lines, _ = parse_log(path)
    for line in lines:
        value, meta = line.value.get("value"), line.value.get("metadata") or {}
        for flag, kept in (("is_error", "errors"), ("is_warning", "warnings")):
            if meta.get(flag) and not str(value).startswith(BENIGN):
                out[kept].append(str(value))
        out[str(line.key)] = value
    return out


def summary_validity(path: Path) -> str | None:
    """``VALID`` / ``INVALID`` as LoadGen's ``mlperf_log_summary.txt`` says (None: no such line)."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("Result is"):
            return line.split(":", 1)[1].strip()
    return None


def invalid_reasons(result: dict[str, Any]) -> list[str]:
    """Why LoadGen called a run invalid: each condition it says was not met, and its own reason."""
    reasons = [why for key, why in CONDITIONS.items() if result.get(key) is False]
    own = str(result.get("result_invalid_reason") or "").strip()
    return reasons + ([own] if own else []) + [f"LoadGen error: {e}" for e in result["errors"]]


def _valid(result: dict[str, Any]) -> bool:
    return result.get("result_validity") == "VALID" and not result["errors"]


def _rate(scenario: str, result: dict[str, Any]) -> float | None:
    value = result.get(RATE_KEYS.get(scenario, ""))
    return float(value) if isinstance(value, (int, float)) else None


def result_metrics(scenario: str, result: dict[str, Any], batch_size: int) -> list[Metric]:
    """The point's metrics from one LoadGen run's figures (offline's one query has no latency
    distribution worth the name: its percentiles are left out)."""
    valid = _valid(result)
    out = [metric("loadgen_valid", "pass" if valid else "fail",
                  detail=None if valid else "LoadGen: " + "; ".join(invalid_reasons(result) or ["INVALID"]))]
    if scenario != "offline":
        for name, pct in PERCENTILES.items():
            ns = result.get(f"result_{pct}_percentile_latency_ns")
            if isinstance(ns, (int, float)):
                out.append(metric(name, float(ns) * 1e-9))
    rate = _rate(scenario, result)
    if rate is not None:
        out += [metric("loadgen_qps", rate), metric("loadgen_throughput", rate * batch_size)]
    if isinstance(result.get("result_query_count"), int):
        out.append(metric("loadgen_query_count", result["result_query_count"]))
    return out


def find_peak_qps(infer: Infer, batches: Sequence[Any], conf: Level1Conf, latency_s: float, seed: int,
                  out_dir: Path) -> tuple[float, list[dict[str, Any]]]:
    """Bisection between 0 and :data:`PEAK_CEILING` ``/ L`` for the highest server QPS whose LoadGen
    run is valid: ``level1.loadgen_peak_probes`` runs, each in ``out_dir/probe_<k>``. Returns the
    highest valid probe's QPS (0.0 when none was valid) and every probe."""
    low, high = 0.0, PEAK_CEILING / latency_s
    probes: list[dict[str, Any]] = []
    for k in range(conf.loadgen_peak_probes):
        qps = (low + high) / 2
        told = settings(conf, "server", latency_s, derive_seed(seed, f"loadgen-probe-{k}"), qps)
        result = run_loadgen(infer, batches, told, out_dir / f"probe_{k}")
        valid = _valid(result)
        ns = result.get(f"result_{conf.loadgen_percentile:.2f}_percentile_latency_ns")
        probes.append({"target_qps": qps, "valid": valid, "completed_qps": _rate("server", result),
                       "latency_at_percentile_s": float(ns) * 1e-9 if isinstance(ns, (int, float)) else None,
                       "query_count": result.get("result_query_count"),
                       **({} if valid else {"why": invalid_reasons(result)})})
        low, high = (qps, high) if valid else (low, qps)
    return low, probes


def loadgen_dir(ctx: PointContext) -> Path:
    """Where the point's LoadGen logs go: ``ctx.mlperf_dir/<point_id>`` (part of the bundle), else
    the point's work directory."""
    return (ctx.mlperf_dir / ctx.point_id) if ctx.mlperf_dir is not None else Path(ctx.work_dir) / "loadgen"


def run_scenario(ctx: PointContext, conf: Level1Conf, infer: Infer,
                 batches: Sequence[Any]) -> tuple[list[Metric], dict[str, Any]]:
    """The point under LoadGen in ``level1.scenario``: its metrics and what the record keeps
    (``extra["loadgen"]``: version, calibration, settings told, LoadGen's figures, the log directory,
    the peak search's probes)."""
    scenario = conf.scenario
    out_dir = loadgen_dir(ctx)
    latency = calibrate(infer, batches)
    told = settings(conf, scenario, latency, ctx.seed)
    result = run_loadgen(infer, batches, told, out_dir)
    metrics = result_metrics(scenario, result, conf.batch_size)
    info: dict[str, Any] = {
        "version": _version(), "scenario": scenario, "sample": f"one batch of {conf.batch_size}",
        "qsl_batches": len(batches), "calibrated_latency_s": latency, "told": told,
        "summary": summary_validity(out_dir / "mlperf_log_summary.txt"),
        "result": {k: v for k, v in result.items() if k.startswith(("result_", "early_stopping"))},
        "log_dir": os.path.relpath(out_dir, ctx.run_dir), "warnings": result["warnings"]}
    if scenario == "server" and conf.loadgen_find_peak_qps:
        peak, info["peak_qps_probes"] = find_peak_qps(infer, batches, conf, latency, ctx.seed, out_dir / "peak_qps")
        info["peak_qps_bounds"] = [0.0, PEAK_CEILING / latency]
        metrics.append(metric("loadgen_peak_qps", peak))
        if peak == 0:
            info["warnings"].append("loadgen_peak_qps: no probe of the search was valid (see peak_qps_probes)")
    return metrics, info


def _version() -> str:
    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return "unknown"


def qsl_batches(x: Any, batch_size: int, place: Callable[[Any], Any], cap: int = 64) -> list[Any]:
    """The QSL's samples: the test split ``x`` cut into consecutive batches of ``batch_size`` (the
    split repeated where it runs out, as level 1's one timed batch is), at most ``cap`` of them,
    each made ready by ``place`` (device, dtype, layout)."""
    import torch

    n = len(x)
    count = max(1, min(cap, math.ceil(n / batch_size)))
    return [place(x[(torch.arange(batch_size) + i * batch_size) % n].contiguous()) for i in range(count)]
