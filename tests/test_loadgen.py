"""Level 1 under MLPerf LoadGen (d5pipe.levels.level1.loadgen, ``level1.scenario``): real runs of the
CLI on two runtimes in single_stream and offline, server with the peak-QPS search, the settings
checked by ``d5pipe plan``, and LoadGen's logs read into metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from d5pipe.core.fields import neutral_defaults
from d5pipe.levels.contract import PointContext
from d5pipe.levels.level1.loadgen import read_detail, result_metrics, summary_validity
from d5pipe.levels.level1.schema import Level1Conf
from d5pipe.levels.level1.stage import cost
from tests.conftest import TEST_CONF, d5pipe
from tests.test_metric_declarations import emitted_undeclared, undeclared

LOADGEN_FIELDS = {"scenario", "loadgen_target_latency_ms", "loadgen_target_qps", "loadgen_min_duration_s",
                  "loadgen_max_duration_s", "loadgen_min_query_count", "loadgen_percentile",
                  "loadgen_samples_per_query", "loadgen_find_peak_qps", "loadgen_peak_probes"}


@pytest.mark.slow
def test_scenarios_on_two_runtimes_are_valid_and_keep_loadgens_logs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "loadgen", "--config-dir", str(TEST_CONF), "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    assert not undeclared(df)
    valid = df[df["metric"] == "loadgen_valid"].set_index(["level1.scenario", "level1.runtime"])["text"]
    assert valid.to_dict() == {(s, rt): "pass" for s in ("single_stream", "offline") for rt in ("torch", "onnxruntime")
                               } | {("server", "torch"): "pass"}
    assert "inference_latency" not in set(df["metric"])  # LoadGen measures in place of d5pipe's timer
    records = {(rec["params"]["level1.scenario"], rec["params"]["level1.runtime"]): rec
               for rec in (json.loads(p.read_text()) for p in (run / "points" / "level1").glob("*.json"))}
    for rec in records.values():
        logs = run / "mlperf" / "level1" / rec["point_id"]
        assert rec["extra"]["loadgen"]["log_dir"] == f"mlperf/level1/{rec['point_id']}"
        assert (logs / "mlperf_log_detail.txt").is_file()
        assert summary_validity(logs / "mlperf_log_summary.txt") == "VALID"
    by_point = df.pivot_table(index="point_id", columns="metric", values="value", aggfunc="first")
    stream = by_point.loc[[records["single_stream", rt]["point_id"] for rt in ("torch", "onnxruntime")]]
    assert ((0 < stream["loadgen_latency_p50"]) & (stream["loadgen_latency_p50"] <= stream["loadgen_latency_p90"])
            & (stream["loadgen_latency_p90"] <= stream["loadgen_latency_p99"])).all()
    offline = by_point.loc[[records["offline", rt]["point_id"] for rt in ("torch", "onnxruntime")]]
    assert (offline["loadgen_qps"] > 0).all() and offline["loadgen_latency_p90"].isna().all()
    assert offline["loadgen_throughput"].tolist() == pytest.approx((offline["loadgen_qps"] * 16).tolist())
    server = records["server", "torch"]
    peak = by_point.loc[server["point_id"], "loadgen_peak_qps"]
    probes = server["extra"]["loadgen"]["peak_qps_probes"]
    assert peak > 0 and len(probes) == 3 and peak == max(p["target_qps"] for p in probes if p["valid"])
    assert (run / "mlperf" / "level1" / server["point_id"] / "peak_qps" / "probe_2" / "mlperf_log_summary.txt").is_file()
    bundled = (run / "CHECKSUMS.sha256").read_text()
    assert f"mlperf/level1/{server['point_id']}/mlperf_log_summary.txt" in bundled


def test_multi_stream_of_a_users_onnx_file_in_process(tmp_path: Path) -> None:
    from d5pipe.levels.level1.point import run_point
    from tests.test_runtimes import _user_onnx

    net = _user_onnx(tmp_path / "net.onnx")
    level1 = {"onnx_file": str(net), "runtime": "onnxruntime", "batch_size": 4, "scenario": "multi_stream",
              "loadgen_min_duration_s": 0.1, "loadgen_samples_per_query": 4}
    cfg = {"name": "t", "seed": 0, "model": {"name": "mlp"}, "dataset": {"name": "digits"}, "level1": level1,
           "timer": {}}
    ctx = PointContext("t", "level1", "p1", {}, cfg, 7, tmp_path, tmp_path / "work", tmp_path / "data", {})
    out = run_point(ctx)
    found = {m.name: m.value for m in out.metrics}
    assert not emitted_undeclared("level1", out.metrics)
    assert found["loadgen_valid"] == "pass" and found["output_check"] == "pass"
    assert 0 < found["loadgen_latency_p50"] <= found["loadgen_latency_p99"]
    told = out.extra["loadgen"]["told"]
    assert told["scenario"] == "MultiStream" and told["multi_stream_samples_per_query"] == 4
    assert (tmp_path / "work" / "loadgen" / "mlperf_log_summary.txt").is_file()  # no mlperf_dir: the work dir


@pytest.mark.parametrize(("override", "key"), [
    ("level1.loadgen_percentile=100", "level1.loadgen_percentile"),
    ("level1.loadgen_min_query_count=0", "level1.loadgen_min_query_count"),
    ("level1.loadgen_target_qps=-5", "level1.loadgen_target_qps"),
    ("level1.loadgen_max_duration_s=0.1", "level1.loadgen_max_duration_s"),  # below the minimum duration, 0.2
])
def test_a_bad_loadgen_setting_fails_plan_naming_its_key(override: str, key: str) -> None:
    r = d5pipe("plan", "loadgen", "--config-dir", str(TEST_CONF), override)
    assert r.returncode == 2 and key in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_scenario_choices_and_the_peak_search_outside_server_fail_plan() -> None:
    r = d5pipe("plan", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes", "level1.scenario=burst")
    assert r.returncode == 2 and "level1.scenario" in r.stderr and "single_stream" in r.stderr, r.stderr
    r = d5pipe("plan", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes",
               "level1.loadgen_find_peak_qps=true")
    assert r.returncode == 2 and "level1.loadgen_find_peak_qps" in r.stderr and "server" in r.stderr, r.stderr


def test_loadgen_fields_leave_point_ids_alone_and_price_their_runs() -> None:
    assert LOADGEN_FIELDS <= set(neutral_defaults(Level1Conf))  # at their defaults, out of a point's identity
    assert neutral_defaults(Level1Conf)["scenario"] == "none"
    server = {"level1": {"scenario": "server", "loadgen_min_duration_s": 3.0, "loadgen_find_peak_qps": True,
                         "loadgen_peak_probes": 4}}
    assert cost(server) >= 5 * 3.0  # the configured run and four probes, each at least its minimum duration
    assert cost({"level1": {"scenario": "single_stream", "loadgen_min_duration_s": 3.0}}) >= 3.0


def test_an_invalid_run_fails_its_verdict_naming_loadgens_reasons(tmp_path: Path) -> None:
    lines = [{"key": "result_validity", "value": "INVALID"}, {"key": "result_min_duration_met", "value": True},
             {"key": "early_stopping_met", "value": False}, {"key": "result_query_count", "value": 31},
             {"key": "result_perf_constraints_met", "value": False},
             {"key": "result_completed_samples_per_sec", "value": 97.8},
             {"key": "result_90.00_percentile_latency_ns", "value": 1292647},
             {"key": "note", "value": "Logging allocation detected: tid 1", "metadata": {"is_warning": True}},
             {"key": "error_invalid_config", "value": "Multiple conf files are used", "metadata": {"is_error": True}}]
    detail = tmp_path / "mlperf_log_detail.txt"  # every line as LoadGen writes it: with its time_ms and metadata
    detail.write_text("\n".join([":::MLLOG {not json", *(":::MLLOG " + json.dumps({"time_ms": 0.01, "metadata": {}, **x})
                                                          for x in lines)]) + "\n")
    result = read_detail(detail)
    assert result["warnings"] == [] and result["result_query_count"] == 31
    assert result["errors"] == ["Multiple conf files are used"]
    found = {m.name: m for m in result_metrics("server", result, 4)}
    assert found["loadgen_valid"].value == "fail" and found["loadgen_valid"].kind == "verdict"
    assert "early stopping" in str(found["loadgen_valid"].detail) and "latency bound" in str(found["loadgen_valid"].detail)
    assert found["loadgen_latency_p90"].value == pytest.approx(1.292647e-3)
    assert found["loadgen_throughput"].value == pytest.approx(4 * 97.8)
    assert not emitted_undeclared("level1", found.values())
