"""Training frameworks (#37, first piece): the small CNN on digits, from the same initial weights
and batches, on PyTorch, JAX and TensorFlow, checked step by step against PyTorch in float64; a
user framework whose optimizer is 1% off fails the check, and so does keras's Adam (its epsilon
sits inside the bias correction)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from d5pipe.levels.level2.frameworks.agreement import check, run_steps
from d5pipe.levels.level2.frameworks.contract import OptimizerSpec, UnsupportedNetwork
from d5pipe.levels.level2.frameworks.jax_framework import JaxFramework
from d5pipe.levels.level2.frameworks.tf_framework import TensorFlowFramework
from d5pipe.levels.level2.frameworks.torch_framework import TorchFramework
from d5pipe.levels.level2.frameworks.trace import initial_weights, trace
from d5pipe.levels.models import cnn, mlp
from tests.conftest import FRAMEWORK_THREADS as THREADS
from tests.plugin_fixtures.user_frameworks import OffByOnePercent

K = 4
SHAPE = (32, 1, 8, 8)
OPTIMIZERS = [OptimizerSpec("sgd", 0.05, momentum=0.9, weight_decay=1e-4), OptimizerSpec("adam", 3e-3),
              OptimizerSpec("adamw", 3e-3, weight_decay=0.01)]


@pytest.fixture(scope="module")
def digits() -> list[tuple[np.ndarray, np.ndarray]]:
    import sklearn.datasets

    bunch = sklearn.datasets.load_digits()
    x = (bunch.data / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    order = np.random.default_rng(7).permutation(len(x))
    return [(x[i], bunch.target[i].astype(np.int64)) for i in np.array_split(order[: 32 * K], K)]


@pytest.fixture(scope="module")
def network() -> tuple[torch.nn.Module, dict[str, np.ndarray]]:
    torch.manual_seed(3)
    model = cnn((1, 8, 8), 10, channels=8, blocks=1)
    return model, initial_weights(model, trace(model, SHAPE))



@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: o.name)
def test_torch_jax_and_tensorflow_take_the_reference_steps(digits, network, opt: OptimizerSpec) -> None:
    model, w0 = network
    graph = trace(model, SHAPE)
    ref = run_steps(TorchFramework(model, dtype="float64"), graph, w0, opt, digits, threads=THREADS)
    assert ref.losses[-1] < ref.losses[0] and graph.buffer_shapes  # it trains; its batch norms keep statistics
    frameworks = [(TorchFramework(model), "float32"), (JaxFramework("float64"), "float64"), (JaxFramework(), "float32"),
                  (TensorFlowFramework(), "float32")]
    if opt.name == "sgd":  # keras's Adam is checked below
        frameworks.append((TensorFlowFramework("float64"), "float64"))
    for fw, dtype in frameworks:
        steps = run_steps(fw, graph, w0, opt, digits, threads=THREADS)
        agreement = check(steps, ref, w0, graph, dtype)
        assert agreement.passed, (fw.name, dtype, agreement.why())
        assert steps.compile_s >= 0 and len(steps.step_s) == K
        assert steps.told["dtype"] == dtype and steps.told["threads"] == THREADS
        assert steps.versions
        if fw.name != "torch":  # each in its own preferred layout
            assert steps.told["layout"].startswith("NHWC"), steps.told
        if fw.name == "jax":  # the float64 check's x64 mode is its own: the float32 run after it is told off
            assert steps.told["jax_enable_x64"] == (dtype == "float64")
    import jax
    import keras

    assert not jax.config.jax_enable_x64 and keras.config.floatx() == "float32"  # no switch left behind
    assert steps.told["intra_op_threads"] == steps.told["inter_op_threads"] == THREADS
    assert steps.told["onednn"] == (os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0")  # TensorFlow's default


class LayoutMix(torch.nn.Module):
    """Layers a channels-last build takes natively (a biased convolution, a padded strided one, max
    pooling, a mean keeping its dims, an in-place add) and ones it hands to torch's layout (group
    norm, a mean keeping C and W, 4-D flatten)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv, self.bn, self.relu = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()
        self.down = nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False)
        self.pool, self.gn, self.flat = nn.MaxPool2d(3, 2, 1), nn.GroupNorm(2, 4), nn.Flatten()
        self.head, self.side = nn.Linear(4 * 2 * 2, 10), nn.Linear(4 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gn(self.pool(self.down(self.relu(self.bn(self.conv(x))))))
        side = self.side(self.flat(y.mean(dim=2)))
        y += y.mean(dim=(2, 3), keepdim=True)  # in place, as transformers' ResNet adds its shortcut
        return self.head(self.flat(y)) + side


def agree_in_float64(model: torch.nn.Module, digits: Any) -> tuple[Any, Any, Any]:
    """(graph, initial weights, PyTorch's float64 steps) of two SGD steps on ``model``, after asserting
    that JAX and TensorFlow in float64 take the same steps."""
    graph = trace(model, SHAPE)
    w0 = initial_weights(model, graph)
    ref = run_steps(TorchFramework(model, dtype="float64"), graph, w0, OPTIMIZERS[0], digits[:2], threads=THREADS)
    for fw in (JaxFramework("float64"), TensorFlowFramework("float64")):
        steps = run_steps(fw, graph, w0, OPTIMIZERS[0], digits[:2], threads=THREADS)
        agreement = check(steps, ref, w0, graph, "float64")
        assert agreement.passed, (fw.name, agreement.why())
    return graph, w0, ref


def test_channels_last_builds_agree_with_torch_on_every_layout_path(digits) -> None:
    torch.manual_seed(5)
    agree_in_float64(LayoutMix(), digits)


def test_every_framework_builds_every_layer_kind() -> None:
    import jax
    import tensorflow as tf

    from d5pipe.levels.level2.frameworks import jax_framework, tf_framework
    from d5pipe.levels.level2.frameworks.graph import KINDS, common_ops

    for ops in (jax_framework._ops(jax.numpy, jax.lax, jax.nn), tf_framework._ops(tf)):
        assert set(common_ops() | ops) - {"batch_stats"} == set(KINDS)


def tiny_vit() -> torch.nn.Module:
    """transformers' ViT (vit_b16's class) at the digits' 1x8x8: 2x2 patches of 4x4, width 16, 2 layers,
    its weights drawn with std 0.5 (transformers' 0.02 keeps so narrow a network's pre-activations so
    near 0 that the tanh GELU is the exact one to 1e-6 of the update: the check could not tell them apart)."""
    transformers = pytest.importorskip("transformers")
    from d5pipe.levels.models import Adapter

    torch.manual_seed(11)
    config = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, num_labels=10,
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.5)
    return Adapter(transformers.ViTForImageClassification(config), input_name="pixel_values", output="logits")


@pytest.mark.slow
def test_a_vision_transformer_takes_the_reference_steps_and_a_wrong_gelu_fails(digits) -> None:
    import dataclasses

    graph, w0, ref = agree_in_float64(tiny_vit(), digits)
    assert {"attention", "gelu", "layer_norm", "parameter", "cat", "expand", "select"} <= set(graph.kinds())
    opt = OPTIMIZERS[0]
    tanh = dataclasses.replace(graph, layers=tuple(  # transformers' ViT takes the exact (erf) GELU
        dataclasses.replace(layer, attrs={"approximate": "tanh"}) if layer.kind == "gelu" else layer
        for layer in graph.layers))
    wrong = check(run_steps(JaxFramework("float64"), tanh, w0, opt, digits[:2], threads=THREADS), ref, w0, graph, "float64")
    assert not wrong.passed and wrong.update_rel_l2 > 1e-6, wrong


def test_keras_adam_is_another_convention_and_fails_its_check(digits, network) -> None:
    model, w0 = network
    graph = trace(model, SHAPE)
    opt = OPTIMIZERS[1]
    ref = run_steps(TorchFramework(model, dtype="float64"), graph, w0, opt, digits, threads=THREADS)
    steps = run_steps(TensorFlowFramework("float64"), graph, w0, opt, digits, threads=THREADS)
    agreement = check(steps, ref, w0, graph, "float64")
    assert not agreement.passed and agreement.update_rel_l2 > 1e-4, agreement
    assert "inside the bias correction" in steps.told["optimizer"]


def test_an_optimizer_one_percent_off_fails_its_check(digits, network) -> None:
    model, w0 = network
    graph = trace(model, SHAPE)
    opt = OPTIMIZERS[1]
    ref = run_steps(TorchFramework(model, dtype="float64"), graph, w0, opt, digits, threads=THREADS)
    steps = run_steps(OffByOnePercent(model, dtype="float64"), graph, w0, opt, digits, threads=THREADS)
    agreement = check(steps, ref, w0, graph, "float64")
    assert not agreement.passed
    assert 1e-3 < agreement.update_rel_l2 < 0.1, agreement
    assert "weight updates differ" in agreement.why()


def test_a_network_with_random_masks_is_not_translated() -> None:
    with pytest.raises(UnsupportedNetwork, match="Dropout"):
        trace(mlp((1, 8, 8), 10, [16], dropout=0.5), SHAPE)
    assert trace(mlp((1, 8, 8), 10, [16]), SHAPE).kinds() == ["flatten", "linear", "relu"]


def test_a_network_a_framework_does_not_build_skips_its_point(tmp_path, monkeypatch) -> None:
    """TensorFlow's builder refuses a grouped convolution while the point checks it: the point is
    skipped with the reason (UnsupportedNetwork's contract), not failed."""
    from d5pipe.levels.contract import PointContext, PointSkipped
    from d5pipe.levels.level2 import framework_point
    from d5pipe.levels.level2.point import run_point

    def grouped(*_args: Any) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1, groups=2), torch.nn.Flatten(),
                                   torch.nn.Linear(4 * 6 * 6, 4))

    monkeypatch.setattr(framework_point, "build_model", grouped)
    images = {"name": "synthetic_images", "image_shape": [2, 6, 6], "n_samples": 64, "n_classes": 4,
              "noise": 0.5, "generator_seed": 7}
    train = {"epochs": 1, "batch_size": 16, "lr": 0.05, "optimizer": "sgd", "peak": False, "framework": "tensorflow",
             "framework_check_steps": 1, "target_accuracy": None}
    cfg = {"name": "t", "seed": 0, "timer": {}, "model": {"name": "cnn"}, "dataset": images, "train": train}
    ctx = PointContext("t", "level2", "p1", {}, cfg, 3, tmp_path, tmp_path / "work", tmp_path / "data", {})
    with pytest.raises(PointSkipped, match="tensorflow: grouped convolutions are not translated"):
        run_point(ctx)


@pytest.mark.slow
def test_a_run_checks_every_framework_and_ranks_only_those_that_pass(tmp_path, cli) -> None:
    from tests.conftest import PLUGIN_FIXTURES, TEST_CONF

    out, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    r = cli("run", "train_frameworks_tiny", "--config-dir", str(TEST_CONF), "--out", str(out), "--allow",
            "user_frameworks", env={"PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_FIXTURES),
                                                                                os.environ.get("PYTHONPATH")])),
                                    "TMPDIR": str(tmp)})
    assert r.returncode == 3, r.stdout + r.stderr  # the user's framework failed its check
    # TensorFlow's autograph writes each function it converts to a temporary file that it deletes at
    # exit: the processes that ran the points ran their exit handlers (d5pipe.measure.process.exit_now)
    assert not list(tmp.glob("__autograph_generated_file*"))
    df = pd.read_parquet(out / "results.parquet")
    checks = df[df["metric"] == "framework_check"].groupby("train.framework")["text"].agg(set).to_dict()
    assert checks == {"torch": {"pass"}, "jax": {"pass"}, "tensorflow": {"pass"}, "off_by_one": {"fail"}}
    logs = df[df["metric"] == "mllog_check"].groupby("train.framework")["text"].agg(set).to_dict()
    assert logs == {name: {"pass"} for name in checks}  # every framework's MLPerf log passes MLPerf's checker
    failed = df[(df["metric"] == "framework_check") & (df["text"] == "fail")]
    assert failed["error"].str.startswith("off_by_one in float64: ").all()
    assert failed["error"].str.contains("weight updates differ").all()
    timed = df[df["metric"] == "compile_s"]
    assert set(timed["train.framework"]) == {"torch", "jax", "tensorflow", "off_by_one"}
    assert (timed[timed["train.framework"].isin(["jax", "tensorflow"])]["value"] > 0).all()
    pairs = pd.read_parquet(out / "comparisons.parquet").set_index("variant")
    assert set(pairs.index) == {"jax", "tensorflow", "off_by_one"}
    for ranked in ("jax", "tensorflow"):
        assert pairs.loc[ranked, "speedup"] > 0 and pairs.loc[ranked, "verdict"] in (
            "faster", "slower", "equivalent", "inconclusive")
    assert "failed a check" in pairs.loc["off_by_one", "method"] and pd.isna(pairs.loc["off_by_one", "speedup"])
    report = (out / "report.md").read_text()
    assert "Training frameworks side by side" in report and "off_by_one" in report


@pytest.mark.slow
def test_the_native_peer_benchmark_runs_and_prints_a_ratio_per_framework() -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "benchmarks" / "bench_native_frameworks.py"
    # the tiny ViT on the two frameworks d5pipe translates to (JAX and TensorFlow: the layouts, the float64
    # check, the native Keras side): the script's whole path on one model. torch's native side is a bare
    # loop over the same module, and ResNet-50 (keras.applications, one call) is what docs/performance.md's
    # runs measure: both together took this test 312 s of `make test`, the tiny ViT on three frameworks 235 s
    frameworks = ("jax", "tensorflow")
    r = subprocess.run([sys.executable, str(script), "--quick", "--model", "vit_b16", "--frameworks",
                        ",".join(frameworks)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    for name in frameworks:  # d5pipe step, native step, ratio; d5pipe's float64 check passed
        assert re.search(rf"^{name} +d5pipe +[0-9.]+s +[0-9.]+s +[0-9.]+ .* pass \(", r.stdout, re.M), r.stdout


def test_the_framework_loop_refuses_what_it_would_not_apply_before_any_job() -> None:
    from d5pipe.core.errors import D5PipeError
    from d5pipe.levels.level2.validate import check_point

    cfg = {"model": {"name": "cnn"}, "dataset": {"name": "digits"}, "train": {"framework": "jax", "optimizer": "sgd"}}
    check_point(cfg)
    for key, value, said in [("num_workers", 2, "train.num_workers"), ("schedule", "cosine", "train.schedule"),
                             ("micro_batches", 2, "train.micro_batches"), ("framework", "mxnet", "train.framework")]:
        with pytest.raises(D5PipeError, match=said):
            check_point({**cfg, "train": {**cfg["train"], key: value}})
    with pytest.raises(D5PipeError, match="train.optimizer"):
        check_point({**cfg, "train": {**cfg["train"], "optimizer": "rms",
                                      "custom_optimizers": {"rms": {"_target_": "d5pipe.levels.optim.torch_optimizer",
                                                                    "cls": "RMSprop"}}}})
