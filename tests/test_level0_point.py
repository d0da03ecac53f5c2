"""level0.run_point end to end on CPU: metrics, raw samples, correctness verdicts, skips, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.core.fields import conf_from_dict
from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped
from d5pipe.levels.level0.point import run_point
from d5pipe.levels.level0.schema import OperatorsConf
from d5pipe.levels.level0.validate import check_point
from tests.conftest import PLUGIN_FIXTURES, TESTING_OPS, TESTING_OPS_ENV
from tests.test_metric_declarations import emitted_undeclared

QUICK_TIMER = {"warmup_s": 0.01, "warmup_max_iters": 3, "min_block_s": 0.002, "budget_s": 0.2,
               "min_samples": 5, "max_samples": 50, "target_ci_pct": 10.0}


@pytest.fixture()
def testing_ops(monkeypatch: pytest.MonkeyPatch) -> str:
    """The broken operators' module, importable and allowed as the runner would allow it."""
    monkeypatch.syspath_prepend(str(PLUGIN_FIXTURES))
    monkeypatch.setenv("D5PIPE_ALLOW", TESTING_OPS_ENV["D5PIPE_ALLOW"])
    return TESTING_OPS


def point(tmp_path: Path, cache: dict[str, Any] | None = None, **ops: Any) -> PointContext:
    operators = {"size": 32, "peak": False, **ops}
    return PointContext(
        experiment="x", stage="level0", point_id="p", params={},
        config={"operators": operators, "timer": QUICK_TIMER, "name": "x", "seed": 0},
        seed=123, run_dir=tmp_path, work_dir=tmp_path, data_dir=tmp_path, executor={},
        cache=cache if cache is not None else {},
    )


def metrics(outcome: PointOutcome) -> dict[str, Any]:
    return {m.name: m for m in outcome.metrics}


def test_matmul_point_reports_time_rates_peak_and_checks(tmp_path: Path) -> None:
    cache: dict[str, Any] = {}
    out = run_point(point(tmp_path, cache, op="matmul", size=48, peak=True))
    m = metrics(out)
    t = m["time"]
    assert t.kind == "timing" and t.samples == "time" and t.unit == "s"
    assert t.ci_low <= t.value <= t.ci_high
    assert out.samples["time"] and len(out.samples["time"]) == m["n_samples"].value
    assert m["flops"].value == 2 * 48**3 and m["bytes"].value == 4 * 3 * 48 * 48
    g = m["gflops"]
    assert g.value == pytest.approx(2 * 48**3 / t.value / 1e9)
    assert g.ci_low == pytest.approx(2 * 48**3 / t.ci_high / 1e9)
    assert m["gbps"].value > 0 and m["pct_peak_flops"].value > 0 and m["pct_peak_bw"].value > 0
    assert m["correctness"].value == "pass" and m["grad_check"].value == "pass"
    assert m["err_l2"].value < 1e-5
    for name in ("iqr", "outliers", "cv", "normal_p", "target_met"):
        assert name in m
    assert isinstance(out.extra["warnings"], list)
    assert any(k.startswith("ceilings:") for k in cache)  # read once per process
    assert m["pct_of_bound"].value > 0 and m["bound_gflops"].value <= m["peak_gflops"].value
    assert out.extra["roofline"]["memory_level"] in ("L1", "L2", "L3", "DRAM")
    json.dumps([x.to_dict() for x in out.metrics])  # records are JSON
    assert emitted_undeclared("level0", out.metrics) == []  # docs/reference/metrics.md names each


@pytest.mark.parametrize("op", ["bmm", "conv2d", "sdpa", "layer_norm", "softmax", "gelu", "sum"])
def test_every_builtin_passes_its_checks(tmp_path: Path, op: str) -> None:
    m = metrics(run_point(point(tmp_path, op=op, size=16, batch=2)))
    assert (m["correctness"].value, m["grad_check"].value) == ("pass", "pass")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_uses_its_tolerance(tmp_path: Path, dtype: str) -> None:
    m = metrics(run_point(point(tmp_path, op="conv2d", impl="channels_last", dtype=dtype)))
    assert m["correctness"].value == "pass"
    assert m["err_l2"].value > 1e-5  # really ran in low precision (float32 would be far smaller)


def test_wrong_forward_fails_without_raising(tmp_path: Path, testing_ops: str) -> None:
    custom = {"bad": f"{testing_ops}:MATMUL_WRONG_FORWARD"}
    m = metrics(run_point(point(tmp_path, op="bad", custom=custom)))
    assert m["correctness"].value == "fail"
    assert m["err_l2"].value > 1e-3


def test_wrong_backward_fails_without_raising(tmp_path: Path, testing_ops: str) -> None:
    custom = {"bad": f"{testing_ops}:MATMUL_WRONG_BACKWARD"}
    m = metrics(run_point(point(tmp_path, op="bad", custom=custom)))
    assert m["correctness"].value == "pass"
    assert m["grad_check"].value == "fail"


@pytest.mark.parametrize("path", ["os:system", "d5pipe_evil.ops:X", "tests.ops:X"])
def test_import_outside_allowed_prefixes_is_a_user_error(tmp_path: Path, path: str) -> None:
    with pytest.raises(D5PipeError) as err:
        run_point(point(tmp_path, op="mine", custom={"mine": path}))
    assert "operators.custom.mine" in str(err.value) and path in str(err.value)
    with pytest.raises(D5PipeError, match="outside the allow-list"):
        check_point({"operators": {"custom": {"mine": path}}, "timer": {}})


def test_custom_path_must_name_an_operator_spec(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="not a d5pipe.levels.level0.spec.OperatorSpec"):
        run_point(point(tmp_path, op="x", custom={"x": "d5pipe.levels.level0.operators:CONV_CHANNELS"}))


def test_unknown_names_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="operators.op"):
        run_point(point(tmp_path, op="matmull"))
    with pytest.raises(D5PipeError, match="operators.dtype"):
        run_point(point(tmp_path, dtype="float8"))
    with pytest.raises(D5PipeError, match="operators"):
        conf_from_dict(OperatorsConf, "operators", {"sise": 3})


def test_inapplicable_impl_or_layout_skips(tmp_path: Path) -> None:
    with pytest.raises(PointSkipped, match="channels_last"):
        run_point(point(tmp_path, op="matmul", impl="channels_last"))
    with pytest.raises(PointSkipped, match="transposed"):
        run_point(point(tmp_path, op="gelu", layout="transposed"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip when CUDA is absent")
def test_missing_device_skips(tmp_path: Path) -> None:
    with pytest.raises(PointSkipped, match="cuda"):
        run_point(point(tmp_path, device="cuda"))


def test_seeded_inputs_give_identical_errors(tmp_path: Path) -> None:
    a = metrics(run_point(point(tmp_path, op="softmax")))
    b = metrics(run_point(point(tmp_path, op="softmax")))
    assert a["err_l2"].value == b["err_l2"].value
    assert not math.isnan(a["err_l2"].value)


@pytest.mark.slow
def test_compile_impl_keeps_compile_time_out(tmp_path: Path) -> None:
    out = run_point(point(tmp_path, op="matmul", size=16, impl="compile", check_backward=False))
    m = metrics(out)
    assert m["compile_s"].value > 0
    assert m["correctness"].value == "pass"
    # compiling takes far longer than one call; the median must not contain it
    assert m["time"].value < m["compile_s"].value
