"""Level-1 runtimes (d5pipe.levels.level1.runtimes): the same network, weights and batch on PyTorch,
ONNX Runtime, OpenVINO and user runtimes, each checked against the float64 reference."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, TEST_CONF, d5pipe


@pytest.mark.slow
def test_every_runtime_runs_the_same_network_and_a_wrong_one_fails_its_output_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "plugin_fixtures"))
    monkeypatch.delenv("D5PIPE_ALLOW", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    run = tmp_path / "run"
    r = d5pipe("run", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes", "--out", str(run))
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]  # the perturbed runtime fails
    df = pd.read_parquet(run / "results.parquet")
    check = df[df["metric"] == "output_check"].set_index("level1.runtime")["text"].to_dict()
    assert check == {"torch": "pass", "onnxruntime": "pass", "openvino": "pass", "honest": "pass",
                     "perturbed": "fail"}
    err = df[df["metric"] == "output_err_l2"].set_index("level1.runtime")["value"]
    assert err["perturbed"] == pytest.approx(0.01, rel=0.05) and err["onnxruntime"] < 1e-5
    latency = df[df["metric"] == "inference_latency"].set_index("level1.runtime")
    assert set(latency.index) == set(check) and (latency["value"] > 0).all()
    assert set(df.loc[df["metric"] == "fwd_bwd_time", "level1.runtime"]) == {"torch"}  # inference only elsewhere
    records = [json.loads(p.read_text()) for p in (run / "points" / "level1").glob("*.json")]
    info = {rec["params"]["level1.runtime"]: rec["extra"]["runtime"] for rec in records}
    assert len({i["threads"] for i in info.values()}) == 1  # one intra-op thread count for every runtime
    assert info["onnxruntime"]["settings"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert info["openvino"]["settings"]["INFERENCE_PRECISION_HINT"] == "f32"
    onnx = {i["onnx"]["sha256"] for i in info.values() if "onnx" in i}
    assert len(onnx) == 1  # one export of the network, shared by both ONNX runtimes
    [path] = {i["onnx"]["path"] for i in info.values() if "onnx" in i}
    assert (run / path).is_file() and path.startswith("onnx/")
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "onnxruntime vs torch" in html and "openvino vs torch" in html


def test_compile_applies_to_the_torch_runtime_only(tmp_path: Path) -> None:
    r = d5pipe("plan", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes", "level1.impl=compile")
    assert r.returncode == 2 and "level1.impl" in r.stderr and "runtime=torch only" in r.stderr
