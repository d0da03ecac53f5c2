"""A training split stored on disk (issue 38, items 2 and 3): npy and png hold the same values as
memory, a DataLoader reads them one sample at a time, and training on them computes the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels.datasets import load, load_for
from d5pipe.levels.level2.point import run_point
from d5pipe.levels.stored_samples import pixel_map, side_path
from tests.conftest import PLUGIN_FIXTURES
from tests.test_level2 import make_ctx, metric

IMAGES = {"name": "synthetic_images", "image_shape": [3, 8, 8], "n_samples": 96, "pixels": "uint8"}


@pytest.mark.parametrize("dataset", [{"name": "digits"}, IMAGES])
def test_every_storage_holds_the_same_values(tmp_path: Path, dataset: dict[str, Any]) -> None:
    loaded = {s: load_for({**dataset, "storage": s}, tmp_path) for s in ("memory", "npy", "png")}
    idx = torch.tensor([5, 0, 17, 3])
    ref = loaded["memory"].x_train[idx]
    for storage in ("npy", "png"):
        data = loaded[storage]
        assert data.meta["key"] != loaded["memory"].meta["key"]  # its own files
        assert torch.equal(data.x_train[idx], ref) and torch.equal(data.x_train[3], ref[3])
        assert torch.equal(data.x_train[:10], loaded["memory"].x_train[:10])
        assert side_path(tmp_path / f"{data.meta['key']}.npz", storage).exists()
    if dataset["name"] == "digits":  # the arrays' checksum is the memory one's: the same content
        assert loaded["png"].meta["checksum"] == loaded["memory"].meta["checksum"]


def test_a_damaged_stored_sample_is_found_and_prepared_again(tmp_path: Path) -> None:
    data = load_for({"name": "digits", "storage": "png"}, tmp_path)
    one = side_path(tmp_path / f"{data.meta['key']}.npz", "png") / "7.png"
    one.write_bytes(b"not a png")
    with pytest.raises(D5PipeError, match="do not match their checksum"):
        load(tmp_path / f"{data.meta['key']}.npz")
    again = load_for({"name": "digits", "storage": "png"}, tmp_path)  # prepared again
    assert one.read_bytes() != b"not a png"
    assert torch.equal(again.x_train[7], load_for({"name": "digits"}, tmp_path).x_train[7])


def test_float_images_are_not_pixels_and_png_says_so() -> None:
    x = np.random.default_rng(0).normal(size=(4, 3, 8, 8)).astype(np.float32)
    with pytest.raises(D5PipeError, match="pixels: uint8"):
        pixel_map(x, "dataset.storage")


@pytest.mark.parametrize(("storage", "workers"), [("npy", 0), ("png", 0), ("png", 1)])
def test_training_on_a_stored_split_computes_what_memory_computes(tmp_path: Path, storage: str,
                                                                  workers: int) -> None:
    def train(storage: str, workers: int, work: str, seed: int = 11) -> Any:
        ctx = make_ctx(tmp_path, {"epochs": 1, "num_workers": workers}, work=work, seed=seed)
        ctx.config["dataset"] = {"name": "digits", "storage": storage}
        ctx.params.update({"dataset.storage": storage, "train.num_workers": workers})  # as a sweep sets them
        return run_point(ctx)

    ref = train("memory", 0, "memory")
    # another point seed (another point ID), the same training seed: the variants start alike
    out = train(storage, workers, f"{storage}{workers}", seed=12)
    assert out.extra["training_seed"]["seed"] == ref.extra["training_seed"]["seed"] != 12
    assert metric(out, "weights_sha256").value == metric(ref, "weights_sha256").value
    assert metric(out, "data_stall_fraction").value > 0
    alone = run_point(make_ctx(tmp_path, {"epochs": 1}, work="alone"))  # no pipeline key: the point seed
    assert alone.extra["training_seed"]["seed"] == 11


def test_measure_loader_times_the_loader_alone_and_the_model_without_it(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, {"epochs": 1, "measure_loader": True})
    ctx.config["dataset"] = {"name": "digits", "storage": "png"}
    out = run_point(ctx)
    loader, model = metric(out, "loader_samples_per_s"), metric(out, "model_samples_per_s")
    assert loader.kind == model.kind == "timing" and loader.value > 0 and model.value > 0
    assert len(out.samples["loader_batch_samples_per_s"]) == len(out.samples["step_time_s"])
    assert len(out.samples["in_memory_step_s"]) == min(20, len(out.samples["step_time_s"]))
    assert metric(out, "step_time_in_memory").ci_low <= metric(out, "step_time_in_memory").value


def test_augmentation_flips_the_same_samples_in_every_loader(tmp_path: Path) -> None:
    from d5pipe.levels.level2.augment import flip_mask

    tags = np.arange(10_000)
    assert 0.45 < flip_mask(7, tags).mean() < 0.55 and not np.array_equal(flip_mask(7, tags), flip_mask(8, tags))

    def train(storage: str, workers: int, augment: str) -> Any:
        ctx = make_ctx(tmp_path, {"epochs": 2, "num_workers": workers, "augment": augment}, work=f"{storage}{workers}{augment}")
        ctx.config["dataset"] = {"name": "digits", "storage": storage}
        ctx.params.update({"dataset.storage": storage, "train.num_workers": workers})
        return run_point(ctx)

    flipped = [metric(train(s, w, "flip"), "weights_sha256").value for s, w in (("memory", 0), ("png", 1))]
    assert flipped[0] == flipped[1]
    assert metric(train("memory", 0, "none"), "weights_sha256").value != flipped[0]


@pytest.fixture()
def user_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_FIXTURES))
    monkeypatch.setenv("D5PIPE_ALLOW", "user_datasets")


def test_a_users_dataset_stays_lazy_and_trains_as_its_stacked_form(tmp_path: Path, user_data: None) -> None:
    import user_datasets  # type: ignore[import-not-found]

    custom = {"name": "mine", "custom": {"mine": "user_datasets.digits"}}
    data = load_for({**custom, "storage": "lazy"}, tmp_path)
    assert data.meta["n_train"] == 1400 and data.meta["n_classes"] == 10
    before = user_datasets.READS["items"]
    assert torch.equal(data.x_train[3], load_for(custom, tmp_path).x_train[3])  # the same values as stacked
    assert user_datasets.READS["items"] - before < 1400 * 2  # nothing stacked at load: a few items read

    def train(storage: str, workers: int) -> Any:
        ctx = make_ctx(tmp_path, {"epochs": 1, "num_workers": workers}, work=f"{storage}{workers}")
        ctx.config["dataset"] = {**custom, "storage": storage}
        ctx.params.update({"dataset.storage": storage, "train.num_workers": workers})
        return run_point(ctx)

    stacked = metric(train("memory", 0), "weights_sha256").value
    assert metric(train("lazy", 0), "weights_sha256").value == stacked
    assert metric(train("lazy", 1), "weights_sha256").value == stacked
    with pytest.raises(D5PipeError, match="lazy keeps a factory's .train, test. torch Datasets"):
        load_for({"name": "arr", "custom": {"arr": "user_datasets.arrays"}, "storage": "lazy"}, tmp_path)
