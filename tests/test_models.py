"""d5pipe.levels.models: every model builds from config and runs forward on each dataset shape."""

from __future__ import annotations

import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels.models import UnsupportedInput, build_model, count_parameters

SHAPES = {"digits": (1, 8, 8), "synthetic_image": (3, 16, 16), "tabular": (30,)}
MODELS = {
    "mlp": {"name": "mlp", "hidden": [32, 16]},
    "cnn": {"name": "cnn", "channels": 8, "blocks": 2},
    "transformer": {"name": "transformer", "d_model": 16, "heads": 2, "layers": 1},
}


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_model_builds_and_runs_forward_and_backward(model_name: str, shape_name: str) -> None:
    shape = SHAPES[shape_name]
    if model_name == "cnn" and len(shape) != 3:
        with pytest.raises(UnsupportedInput, match="needs \\(C, H, W\\)"):
            build_model(MODELS[model_name], shape, 5)
        return
    torch.manual_seed(0)
    model = build_model(MODELS[model_name], shape, 5)
    x = torch.randn(4, *shape)
    out = model(x)
    assert out.shape == (4, 5) and torch.isfinite(out).all()
    out.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)


def test_sizes_come_from_config() -> None:
    mlp = build_model({"name": "mlp", "hidden": [32, 16]}, (1, 8, 8), 10)
    assert count_parameters(mlp) == (64 * 32 + 32) + (32 * 16 + 16) + (16 * 10 + 10)
    small = build_model({"name": "cnn", "channels": 4, "blocks": 1}, (1, 8, 8), 10)
    big = build_model({"name": "cnn", "channels": 8, "blocks": 3}, (1, 8, 8), 10)
    assert count_parameters(big) > count_parameters(small)
    t1 = build_model({"name": "transformer", "d_model": 16, "heads": 2, "layers": 1}, (1, 8, 8), 10)
    t2 = build_model({"name": "transformer", "d_model": 16, "heads": 2, "layers": 2}, (1, 8, 8), 10)
    assert count_parameters(t2) > count_parameters(t1)


def test_same_seed_same_initial_weights() -> None:
    torch.manual_seed(7)
    a = build_model(MODELS["cnn"], (1, 8, 8), 10)
    torch.manual_seed(7)
    b = build_model(MODELS["cnn"], (1, 8, 8), 10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_bad_model_configs_are_user_errors() -> None:
    with pytest.raises(D5PipeError, match="model.name"):
        build_model({"name": "resnet152"}, (1, 8, 8), 10)
    with pytest.raises(D5PipeError, match="multiple of heads"):
        build_model({"name": "transformer", "d_model": 10, "heads": 4}, (1, 8, 8), 10)
    with pytest.raises(D5PipeError, match="unknown key"):
        build_model({"name": "mlp", "width": 3}, (1, 8, 8), 10)
