"""Level-1 runtimes (d5pipe.levels.level1.runtimes): the same network, weights and batch on PyTorch,
ONNX Runtime, OpenVINO and user runtimes, each checked against the float64 reference."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, TEST_CONF, d5pipe


@pytest.mark.slow
def test_every_runtime_runs_the_same_network_and_a_wrong_one_fails_its_output_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "tests" / "plugin_fixtures"),
                                                                    os.environ.get("PYTHONPATH")])))
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
    assert info["onnxruntime"]["told"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert info["openvino"]["told"]["INFERENCE_PRECISION_HINT"] == "f32"
    onnx = {i["onnx"]["sha256"] for i in info.values() if "onnx" in i}
    assert len(onnx) == 1  # one export of the network, shared by both ONNX runtimes
    [path] = {i["onnx"]["path"] for i in info.values() if "onnx" in i}
    assert (run / path).is_file() and path.startswith("onnx/")
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "onnxruntime vs torch" in html and "openvino vs torch" in html
    pairs = pd.read_parquet(run / "comparisons.parquet")  # the side-by-side as data, beside results.parquet
    runtime_pairs = pairs[pairs["factor"] == "level1.runtime"]
    assert set(runtime_pairs["variant"]) == {"onnxruntime", "openvino", "honest", "perturbed"}
    assert set(runtime_pairs["baseline"]) == {"torch"}
    assert {"speedup", "ci_low", "ci_high", "p_value", "verdict"} <= set(pairs.columns)


def test_compile_applies_to_the_torch_runtime_only(tmp_path: Path) -> None:
    r = d5pipe("plan", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes", "level1.impl=compile")
    assert r.returncode == 2 and "level1.impl" in r.stderr and "runtime=torch only" in r.stderr


def _user_onnx(path: Path, seed: int = 0) -> Path:
    """A two-layer network written with onnx.helper (not by d5pipe's exporter): MatMul, Add, Relu, Gemm."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Gemm", ["r", "w2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "user_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], [w1, b1, w2, b2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.mark.slow
def test_a_users_onnx_file_runs_on_both_onnx_runtimes_checked_by_the_reference_evaluator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "tests" / "plugin_fixtures"),
                                                                    os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    net = _user_onnx(tmp_path / "user_net.onnx")
    args = ["runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes", f"level1.onnx_file={net}",
            "sweep.grid.level1.runtime=[onnxruntime,openvino]"]
    run = tmp_path / "run"
    r = d5pipe("run", *args, "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    check = df[df["metric"] == "output_check"].set_index("level1.runtime")["text"].to_dict()
    assert check == {"onnxruntime": "pass", "openvino": "pass"}
    assert (df.loc[df["metric"] == "output_err_l2", "value"] < 1e-5).all()
    assert set(df.loc[df["metric"] == "inference_latency", "level1.runtime"]) == {"onnxruntime", "openvino"}
    records = [json.loads(p.read_text()) for p in (run / "points" / "level1").glob("*.json")]
    assert {rec["extra"]["network"]["shape"][0] for rec in records} == {16}  # level1.batch_size fills N
    assert "ReferenceEvaluator" in records[0]["extra"]["output_check"]["reference"]
    import hashlib
    [kept] = {rec["extra"]["network"]["kept"] for rec in records}  # the file travels with the run
    assert kept.startswith("onnx/") and (run / kept).read_bytes() == net.read_bytes()
    assert records[0]["extra"]["network"]["sha256"] == hashlib.sha256(net.read_bytes()).hexdigest()
    assert kept in (run / "CHECKSUMS.sha256").read_text()
    # the file's content is part of the points' identity
    before = json.loads(d5pipe("plan", *args, "--json").stdout)
    _user_onnx(net, seed=1)
    after = json.loads(d5pipe("plan", *args, "--json").stdout)
    assert before != after
    relative = d5pipe("plan", "runtimes", "--config-dir", str(TEST_CONF), "--allow", "user_runtimes",
                      "level1.onnx_file=user_net.onnx")
    assert relative.returncode == 2 and "level1.onnx_file" in relative.stderr and "absolute" in relative.stderr
    on_torch = d5pipe("plan", *args[:5], f"level1.onnx_file={net}", "sweep.grid.level1.runtime=[torch]")
    assert on_torch.returncode == 2 and "level1.runtime" in on_torch.stderr
