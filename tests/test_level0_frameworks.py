"""Level 0 on several frameworks (operators.framework; d5pipe.levels.level0.frameworks): every
built-in passes its forward check against float64 on every framework that has it, a user operator
wrong in one framework fails there only, a two-framework run gives a side-by-side row, and the
declarations are what the schema, the plan and the docs derive from."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import d5pipe
from d5pipe import D5PipeError
from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.contract import PointContext, PointSkipped
from d5pipe.levels.level0.frameworks import FRAMEWORKS, NAMES, docs_table
from d5pipe.levels.level0.point import run_point
from d5pipe.levels.level0.schema import BUILTIN_OPERATORS, BUILTIN_TARGET, OperatorsConf
from d5pipe.levels.level0.validate import check_framework
from tests.conftest import FRAMEWORK_THREADS, PLUGIN_FIXTURES, ROOT, TEST_CONF
from tests.conftest import d5pipe as cli

QUICK_TIMER = {"warmup_s": 0.005, "warmup_max_iters": 2, "min_block_s": 0.001, "budget_s": 0.02,
               "min_samples": 3, "max_samples": 10, "target_ci_pct": 50.0}
ENGINES: dict[str, Any] = {}
"""One engine per framework (and thread count) for the whole module, as a shard process keeps them."""
OTHERS = tuple(name for name, f in FRAMEWORKS.items() if f.engine is not None)


@pytest.fixture(autouse=True)
def framework_threads() -> Iterator[None]:
    """The points at the tests' FRAMEWORK_THREADS, as a shard's worker runs its points at its
    ``OMP_NUM_THREADS``: TensorFlow and XLA keep the first point's threads for the whole process."""
    before = torch.get_num_threads()
    torch.set_num_threads(FRAMEWORK_THREADS)
    yield
    torch.set_num_threads(before)


def _run(tmp_path: Path, **ops: Any) -> dict[str, Any]:
    operators = {"size": 8, "batch": 2, "peak": False, "time_backward": False, **ops}
    ctx = PointContext(experiment="x", stage="level0", point_id="p", params={},
                       config={"operators": operators, "timer": QUICK_TIMER, "name": "x", "seed": 0},
                       seed=7, run_dir=tmp_path, work_dir=tmp_path, data_dir=tmp_path, executor={}, cache=ENGINES)
    out: PointOutcome = run_point(ctx)
    return {"extra": out.extra, **{m.name: m.value for m in out.metrics}}


def test_the_declarations_are_what_the_schema_and_docs_derive_from() -> None:
    assert NAMES[0] == OperatorsConf().framework == "torch"
    assert FRAMEWORKS["torch"].builtins == BUILTIN_OPERATORS
    plugins = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert docs_table() in plugins, "docs/plugins.md: paste d5pipe.levels.level0.frameworks.docs_table()"
    for f in FRAMEWORKS.values():
        assert set(f.builtins) <= set(BUILTIN_OPERATORS) and set(f.dtypes) and f.packages


def test_no_module_path_of_level0s_builtins_is_spelled_outside_its_package() -> None:
    """The modules of level 0's built-ins (its operators' target, each framework's engine), derived
    from the declarations, appear in no string outside ``levels/level0/``."""
    modules = {BUILTIN_TARGET.rsplit(".", 1)[0]} | {f.engine.__module__ for f in FRAMEWORKS.values() if f.engine}
    src = Path(d5pipe.__file__).resolve().parent
    offenders = []
    for path in src.rglob("*.py"):
        if path.relative_to(src).parts[:2] == ("levels", "level0"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                offenders += [f"{path}:{node.lineno}" for m in modules if m in node.value]
    assert offenders == []


@pytest.mark.slow
@pytest.mark.parametrize("framework", OTHERS)
def test_every_builtin_passes_its_checks_on_every_framework_that_has_it(tmp_path: Path, framework: str) -> None:
    declared = FRAMEWORKS[framework]
    for op in BUILTIN_OPERATORS:
        if op not in declared.builtins:
            with pytest.raises(PointSkipped, match=f"no built-in {op!r}"):
                _run(tmp_path, op=op, framework=framework)
            continue
        m = _run(tmp_path, op=op, framework=framework)
        assert m["correctness"] == "pass" and m["err_l2"] < 1e-5, (op, m["err_l2"])
        assert m["time"] > 0 and m["gflops"] > 0 and m["extra"]["framework"]["sync"] == declared.sync
        if declared.differentiates:
            assert m["grad_check"] == "pass", (op, m["grad_err_l2"])
        else:
            assert "grad_check" not in m and any("no gradient check" in n for n in m["extra"]["notes"])


@pytest.mark.slow
def test_float64_and_what_a_framework_lacks(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    m = _run(tmp_path, op="matmul", framework="jax", dtype="float64")
    assert m["correctness"] == "pass" and m["err_l2"] < 1e-10 and m["grad_check"] == "pass"
    assert not jax.config.jax_enable_x64  # the x64 mode was the point's alone
    with pytest.raises(PointSkipped, match="onnxruntime has no CPU kernel"):
        _run(tmp_path, op="conv2d", framework="onnxruntime", dtype="float64")
    with pytest.raises(PointSkipped, match="computes in float64, float32, not bfloat16"):
        _run(tmp_path, op="matmul", framework="onnxruntime", dtype="bfloat16")


@pytest.mark.slow
def test_a_user_operator_wrong_in_one_framework_fails_there_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_FIXTURES))
    monkeypatch.setenv("D5PIPE_ALLOW", "framework_ops")
    custom = {"mymm": "framework_ops:MYMM", "jax_only": "framework_ops:JAX_ONLY"}
    verdicts = {fw: _run(tmp_path, op="mymm", custom=custom, framework=fw)["correctness"] for fw in NAMES}
    assert verdicts == {"torch": "pass", "jax": "pass", "tensorflow": "fail", "onnxruntime": "pass"}
    assert _run(tmp_path, op="jax_only", custom=custom, framework="jax")["correctness"] == "pass"
    with pytest.raises(PointSkipped, match="gives no tensorflow implementation"):
        _run(tmp_path, op="jax_only", custom=custom, framework="tensorflow")
    with pytest.raises(PointSkipped, match="no PyTorch implementation"):
        _run(tmp_path, op="jax_only", custom=custom, framework="torch")


def test_plan_rejects_an_unknown_framework_with_one_line() -> None:
    r = cli("plan", "tiny", "--config-dir", str(TEST_CONF), "operators.framework=mxnet")
    assert r.returncode == 2 and "operators.framework" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_plan_checks_a_frameworks_package_and_capabilities() -> None:
    with pytest.raises(D5PipeError, match="'operators.framework': 'tensorflow' needs the Python package 'tensorflow'"):
        check_framework({"framework": "tensorflow"}, is_installed=lambda package: package != "tensorflow")
    with pytest.raises(D5PipeError, match="'operators.impl': 'compile' does not apply to operators.framework=jax"):
        check_framework({"framework": "jax", "impl": "compile"})
    with pytest.raises(D5PipeError, match="'operators.device'"):
        check_framework({"framework": "onnxruntime", "device": "cuda:0"})
    check_framework({"framework": "torch", "impl": "compile", "device": "cuda"})


@pytest.mark.slow
def test_two_frameworks_side_by_side_through_d5pipe_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = cli("run", "level0_frameworks", "--config-dir", str(TEST_CONF), "--out", str(run), "--no-history")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    checks = df[df["metric"] == "correctness"]
    assert sorted(checks["operators.framework"]) == ["jax", "jax", "torch", "torch"] and set(checks["text"]) == {"pass"}
    from d5pipe.results.comparisons import comparisons
    from d5pipe.results.run_results import build_results
    from d5pipe.rundir.layout import RunDir

    out = comparisons(df, build_results(run).samples, RunDir(run).config)
    [row] = out[out["factor"] == "operators.framework"].to_dict(orient="records")
    assert (row["baseline"], row["variant"], row["metric"]) == ("torch", "jax", "time")
    assert row["n_baseline"] == row["n_variant"] == 2 and row["quality_metric"] == "err_l2"
    records = [json.loads(p.read_text()) for p in (run / "points" / "level0").glob("*.json")]
    told = {rec["params"]["operators.framework"]: rec["extra"].get("framework") for rec in records}
    assert told["torch"] is None and told["jax"]["sync"] == FRAMEWORKS["jax"].sync
