"""User code verified against references: wrong implementations ``fail``, correct ones ``pass``,
and a dtype whose tolerance cannot see a 1% error says ``undetectable``.

* L0: a user operator with a 1% wrong backward fails ``grad_check``; backward is timed on its own;
* L1: a user model against the model it declares as its reference (``output_check``);
* L2: a user optimizer against its reference optimizer (``optimizer_check``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "plugin_fixtures"
EXAMPLE = ROOT / "examples" / "byo"
QUICK_TIMER = {"warmup_s": 0.0, "warmup_max_iters": 2, "min_block_s": 0.001, "budget_s": 0.05,
               "min_samples": 5, "max_samples": 20, "target_ci_pct": 50.0}


@pytest.fixture(autouse=True)
def plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fixtures and the example package importable and allowed (the runner's decision)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("D5PIPE_ALLOW", "byo_wrong,mypkg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))


def _ctx(tmp_path: Path, stage: str, config: dict[str, Any]) -> PointContext:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return PointContext("v", stage, "p", {}, {"timer": QUICK_TIMER, **config}, 11, tmp_path, tmp_path, data, {})


def _m(out: PointOutcome) -> dict[str, Any]:
    return {m.name: m.value for m in out.metrics}


# --- L0 -------------------------------------------------------------------------------------------

def test_wrong_operator_backward_fails_and_backward_is_timed(tmp_path: Path) -> None:
    from d5pipe.levels.level0.point import run_point

    def op(name: str, target: str) -> dict[str, Any]:
        return _m(run_point(_ctx(tmp_path, "level0", {"operators": {
            "op": name, "size": 32, "peak": False, "custom": {name: {"_target_": target}}}})))

    bad = op("bad", "byo_wrong.bad_backward_matmul")
    assert (bad["correctness"], bad["grad_check"]) == ("pass", "fail")
    assert bad["grad_err_l2"] > 1e-3 and bad["compare_to"] == "matmul"
    good = op("mine", "mypkg.ops.einsum_matmul")
    assert (good["correctness"], good["grad_check"]) == ("pass", "pass")
    for m in (good, bad):
        assert m["time"] > 0 and m["time_bwd"] > 0 and m["time_fwd_bwd"] > 0


# --- L1 -------------------------------------------------------------------------------------------

def _level1(tmp_path: Path, target: dict[str, Any], dtype: str = "float32", **level1: Any) -> dict[str, Any]:
    from d5pipe.levels.level1.point import run_point

    config = {"model": {"name": "user", "reference": "mlp", "hidden": [64], "custom": {"user": target}},
              "dataset": {"name": "digits"},
              "level1": {"batch_size": 32, "dtype": dtype, "measure_memory": False, **level1}}
    return _m(run_point(_ctx(tmp_path, "level1", config)))


def test_wrong_user_model_fails_against_its_reference(tmp_path: Path) -> None:
    wrong = _level1(tmp_path, {"_target_": "byo_wrong.LeakyMLP", "hidden": 64})
    assert wrong["output_check"] == "fail" and wrong["output_err_l2"] > 1e-3
    right = _level1(tmp_path, {"_target_": "mypkg.models.TinyMLP", "hidden": 64})
    assert right["output_check"] == "pass" and right["output_err_l2"] < 1e-5


def test_one_percent_error_is_caught_in_float32_and_float16_undetectable_in_bfloat16(tmp_path: Path) -> None:
    scaled = {"_target_": "byo_wrong.ScaledMLP", "hidden": 64, "error": 0.01}
    assert _level1(tmp_path, scaled, "float32")["output_check"] == "fail"
    assert _level1(tmp_path, scaled, "float16")["output_check"] == "fail"
    bf16 = _level1(tmp_path, scaled, "bfloat16")
    assert bf16["output_check"] == "undetectable" and 0.005 < bf16["output_err_l2"] < 0.03
    right_bf16 = _level1(tmp_path, {"_target_": "mypkg.models.TinyMLP", "hidden": 64}, "bfloat16")
    assert right_bf16["output_check"] == "undetectable"  # never "pass": a 1% error would look the same


def test_tolerance_is_configurable_per_point(tmp_path: Path) -> None:
    scaled = {"_target_": "byo_wrong.ScaledMLP", "hidden": 64, "error": 0.01}
    loose = _level1(tmp_path, scaled, "float32", output_tol_l2=0.05, output_tol_max_rel=0.05)
    assert loose["output_check"] == "undetectable"  # within 5%, but 5% cannot see 1%
    strict = _level1(tmp_path, {"_target_": "mypkg.models.TinyMLP", "hidden": 64}, "bfloat16",
                     output_tol_l2=1e-9, output_tol_max_rel=1e-9)
    assert strict["output_check"] == "fail"


def test_builtin_implementations_pass_against_the_float64_reference(tmp_path: Path) -> None:
    from d5pipe.levels.level1.point import run_point

    for model, layout in (("cnn", "channels_last"), ("transformer", "contiguous")):
        config = {"model": {"name": model, "channels": 4, "blocks": 1, "d_model": 16, "heads": 2, "layers": 1},
                  "dataset": {"name": "digits"},
                  "level1": {"batch_size": 16, "layout": layout, "measure_memory": False}}
        m = _m(run_point(_ctx(tmp_path, "level1", config)))
        assert m["output_check"] == "pass" and m["output_err_l2"] < 1e-5, (model, m["output_err_l2"])


# --- L2 -------------------------------------------------------------------------------------------

def _level2(tmp_path: Path, target: dict[str, Any], **train: Any) -> dict[str, Any]:
    from d5pipe.levels.level2.point import run_point

    config = {"model": {"name": "mlp", "hidden": [32]}, "dataset": {"name": "digits"},
              "train": {"optimizer": "mine", "lr": 0.05, "momentum": 0.9, "epochs": 1, "batch_size": 64,
                        "reference_optimizer": "sgd", "reference_steps": 15, "target_accuracy": None,
                        "custom_optimizers": {"mine": target}, **train}}
    return _m(run_point(_ctx(tmp_path, "level2", config)))


def test_momentum_sign_error_fails_and_a_correct_optimizer_passes(tmp_path: Path) -> None:
    wrong = _level2(tmp_path, {"_target_": "byo_wrong.SignMomentumSGD", "lr": 0.05, "momentum": 0.9})
    assert wrong["optimizer_check"] == "fail" and wrong["optimizer_divergence"] > 0.1
    right = _level2(tmp_path, {"_target_": "mypkg.optim.MomentumSGD", "lr": 0.05, "momentum": 0.9})
    assert right["optimizer_check"] == "pass" and right["optimizer_divergence"] < 1e-5


def test_one_percent_optimizer_error_fails_unless_the_tolerance_is_too_wide(tmp_path: Path) -> None:
    off = {"_target_": "byo_wrong.lr_off_sgd", "lr": 0.05, "momentum": 0.9, "error": 0.01}
    strict = _level2(tmp_path, off)
    assert strict["optimizer_check"] == "fail" and 0.003 < strict["optimizer_divergence"] < 0.05
    assert _level2(tmp_path, off, reference_tolerance=0.1)["optimizer_check"] == "undetectable"


def test_one_module_one_formula_and_outcome() -> None:
    """The divergence formula, the tolerance table and the outcomes live in d5pipe.levels.verify,
    and the framework agreement's update difference is that formula."""
    import numpy as np
    import torch

    from d5pipe.levels.level2.frameworks.agreement import Steps, _rel_l2
    from d5pipe.levels.verify import NO_DETECT, relative_divergence, tolerance, verdict

    start, ref, got = np.zeros(4), np.array([1.0, 0, 0, 0]), np.array([1.01, 0, 0, 0])
    assert relative_divergence(got, ref, start) == pytest.approx(0.01)
    assert relative_divergence(torch.tensor(got), torch.tensor(ref), torch.tensor(start)) == pytest.approx(0.01)
    assert relative_divergence(np.full(4, np.nan), ref, start) == np.inf
    steps = [Steps("f", {}, {}, 0.0, [], [], {"w": w}) for w in (got, ref)]
    assert _rel_l2(steps[0], steps[1], {"w": start}, ["w"]) == relative_divergence(got, ref, start)
    assert tolerance("operator", torch.float16) == (5e-3, 2e-2)
    assert tolerance("network", "bfloat16", l2=0.1) == (0.1, 5e-2)
    assert tolerance("framework", "float64")[0] == 1e-6
    assert [verdict(e, 0.03) for e in (0.04, 0.02, np.nan)] == ["fail", "undetectable", "fail"]
    assert verdict(0.02, 0.03, NO_DETECT) == "pass" and verdict(1e-6, 1e-5) == "pass"
