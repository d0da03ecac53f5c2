"""Real networks by name (d5pipe.levels.zoo) and library models without wrappers: factories get
d5pipe's arguments only where they take them, keyword inputs and output objects go through a
declared adapter (d5pipe.levels.models.Adapter)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels.instantiate import accepted
from d5pipe.levels.models import Adapter, build_model, count_parameters, logits_of
from d5pipe.levels.zoo import PUBLISHED_PARAMETERS
from tests.conftest import TEST_CONF, d5pipe


@pytest.mark.parametrize(("name", "shape", "classes"), [
    ("resnet50", (3, 224, 224), 1000), ("vit_b16", (3, 224, 224), 1000), ("gpt2", (1024,), 2)])
def test_zoo_models_have_their_published_parameter_counts(name: str, shape: tuple[int, ...], classes: int) -> None:
    with torch.device("meta"):  # the architecture without allocating its weights
        model = build_model({"name": name}, shape, classes)
    assert isinstance(model, Adapter)
    counted = model.model.transformer if name == "gpt2" else model  # GPT-2's count excludes its head
    assert count_parameters(counted) == PUBLISHED_PARAMETERS[name][0]


def test_zoo_models_refuse_shapes_they_cannot_take_with_the_reason() -> None:
    from d5pipe.levels.models import UnsupportedInput

    with pytest.raises(UnsupportedInput, match="vit_b16 needs square images"):
        build_model({"name": "vit_b16"}, (3, 64, 48), 10)
    with pytest.raises(UnsupportedInput, match="gpt2 needs"):
        build_model({"name": "gpt2"}, (3, 32, 32), 10)


def test_a_factory_gets_only_the_arguments_it_takes() -> None:
    def plain(config: int) -> None: ...
    def shaped(input_shape: tuple[int, ...], n_classes: int, width: int = 3) -> None: ...
    def anything(**kwargs: Any) -> None: ...
    offered = {"input_shape": (3, 8, 8), "n_classes": 10}
    assert accepted(plain, offered) == {}
    assert accepted(shaped, offered) == offered
    assert accepted(anything, offered) == offered


def test_logits_come_from_a_tensor_an_output_object_or_a_mapping() -> None:
    t = torch.ones(2, 3)
    assert logits_of(t, "", "model") is t
    assert logits_of(SimpleNamespace(logits=t), "", "model") is t
    assert logits_of(OrderedDict(scores=t), "scores", "model") is t
    with pytest.raises(D5PipeError, match="model.custom.m: the model returned a SimpleNamespace without a tensor 'logits'"):
        logits_of(SimpleNamespace(hidden=t), "", "model.custom.m")


def run_results(experiment: str, tmp_path: Path) -> pd.DataFrame:
    """``d5pipe run`` of a test experiment with transformers allowed; its results.parquet."""
    run = tmp_path / "run"
    r = d5pipe("run", experiment, "--config-dir", str(TEST_CONF), "--allow", "transformers", "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return pd.read_parquet(run / "results.parquet")


@pytest.mark.slow
def test_a_library_model_runs_levels_1_and_2_without_a_wrapper(tmp_path: Path) -> None:
    """transformers' ResNet by _target_ (keyword input, output object), on synthetic 3x64x64 images."""
    df = run_results("zoo_library", tmp_path)
    l1 = df[df["stage"] == "level1"].set_index("metric")
    assert l1.loc["output_check", "text"] == "pass" and l1.loc["inference_latency", "value"] > 0
    assert l1.loc["fwd_bwd_time", "value"] > 0
    l2 = df[df["stage"] == "level2"].set_index("metric")
    assert l2.loc["n_parameters", "value"] == l1.loc["n_parameters", "value"] > 0
    assert l2.loc["test_accuracy", "value"] > 1 / 4  # trained: above chance on 4 classes


def test_plan_rejects_a_non_identifier_adapter_field_before_any_job(tmp_path: Path) -> None:
    r = d5pipe("plan", "zoo_library", "--config-dir", str(TEST_CONF), "--allow", "transformers",
               "model.custom.hf_resnet._output_='not a field'")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1].count("model.custom.hf_resnet._output_") == 1


@pytest.mark.slow
def test_token_ids_run_through_level_1_on_every_runtime(tmp_path: Path) -> None:
    df = run_results("zoo_tokens", tmp_path)
    check = df[df["metric"] == "output_check"].set_index("level1.runtime")["text"].to_dict()
    assert check == {"torch": "pass", "onnxruntime": "pass", "openvino": "pass"}
    assert (df.loc[df["metric"] == "inference_latency", "value"] > 0).all()
