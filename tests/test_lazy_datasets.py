"""Generated datasets (synthetic_images, synthetic_tokens): per-index samples from the seed, a
metadata-only file, LazySamples indexing, validation, and levels 1-3 on them."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels import lazy_samples
from d5pipe.levels.contract import PointContext, PointSkipped
from d5pipe.levels.dataset_key import dataset_key, resolve
from d5pipe.levels.datasets import Dataset, load, load_for, prepare
from d5pipe.levels.lazy_samples import LazySamples, split_sizes
from tests.conftest import TEST_CONF, d5pipe

IMAGES = {"name": "synthetic_images", "image_shape": [2, 6, 6], "n_samples": 400, "n_classes": 4,
          "noise": 0.5, "generator_seed": 7}
TOKENS = {"name": "synthetic_tokens", "seq_len": 12, "vocab_size": 100, "n_samples": 300, "n_classes": 5}


def lazy(data: Dataset) -> tuple[LazySamples, LazySamples, LazySamples, LazySamples]:
    parts = (data.x_train, data.y_train, data.x_test, data.y_test)
    assert all(isinstance(p, LazySamples) for p in parts) and data.generated
    return parts  # type: ignore[return-value]


def test_same_index_gives_the_same_sample_across_loads_and_batch_compositions(tmp_path: Path) -> None:
    x1, y1, xt1, _ = lazy(load_for(IMAGES, tmp_path / "a"))
    x2, y2, xt2, _ = lazy(load_for(IMAGES, tmp_path / "b"))
    a = x1[torch.tensor([3, 7, 200])]
    b = x2[np.array([200, 0, 3, 7])]
    assert a.dtype == torch.float32 and a.shape == (3, 2, 6, 6)
    assert torch.equal(a[0], b[2]) and torch.equal(a[1], b[3]) and torch.equal(a[2], b[0])
    assert torch.equal(x1[7], a[1]) and torch.equal(x1[3:8][4], a[1]) and torch.equal(x1[-1], x1[len(x1) - 1])
    assert torch.equal(y1[torch.tensor([3, 7, 200])], y2[[3, 7, 200]]) and int(y1[7]) == int(y2[7:8][0])
    assert torch.equal(xt1[:5], xt2[:5]) and not torch.equal(xt1[0], x1[0])
    other = lazy(load_for({**IMAGES, "generator_seed": 8}, tmp_path / "c"))[0]
    assert not torch.equal(other[3], a[0])


def test_labels_in_range_and_images_carry_their_class(tmp_path: Path) -> None:
    data = load_for({**IMAGES, "noise": 0.3}, tmp_path)
    x, y, xt, yt = lazy(data)
    assert data.input_shape == (2, 6, 6) and data.n_classes == 4
    labels = y[:]
    assert labels.dtype == torch.int64 and int(labels.min()) >= 0 and int(labels.max()) < 4
    assert torch.bincount(labels, minlength=4).min() > 40  # every class, roughly balanced
    # nearest class mean (fit on train) far above chance on test: training has signal
    means = torch.stack([x[:][labels == c].flatten(1).mean(0) for c in range(4)])
    pred = torch.cdist(xt[:].flatten(1), means).argmin(1)
    assert float((pred == yt[:]).float().mean()) > 0.9


def test_tokens_are_int64_ids_below_the_vocabulary(tmp_path: Path) -> None:
    data = load_for(TOKENS, tmp_path)
    x, y, xt, yt = lazy(data)
    batch = x[torch.arange(0, len(x), 3)]
    assert data.input_shape == (12,) and batch.dtype == torch.int64 and batch.shape == (len(range(0, len(x), 3)), 12)
    assert int(batch.min()) >= 0 and int(batch.max()) < 100 and len(torch.unique(batch)) > 50
    assert int(yt[:].min()) >= 0 and int(yt[:].max()) < 5 and torch.equal(xt[2], xt[[0, 2]][1])
    assert data.meta["dtype"] == "int64" and x.dtype == torch.int64 and x.shape == (len(x), 12)


def test_split_by_index_and_indexing_forms(tmp_path: Path) -> None:
    assert split_sizes(400, 0.25) == (300, 100) and split_sizes(4, 0.01) == (3, 1) and split_sizes(4, 0.99) == (1, 3)
    data = load_for({**IMAGES, "n_samples": 10, "test_fraction": 0.3}, tmp_path)
    x, y, xt, yt = lazy(data)
    assert (len(x), len(xt), len(y), len(yt)) == (7, 3, 7, 3) and data.meta["n_train"] == 7
    assert torch.equal(xt[0], torch.from_numpy(x.generator.samples(np.array([7])))[0])
    whole = lazy_samples.LazySamples(x.generator, "x", 0, 10)
    assert torch.equal(whole[7], xt[0]) and torch.equal(whole[9], xt[-1])  # the last indices are test
    assert x[::3].shape == (3, 2, 6, 6) and x[5:2].shape == (0, 2, 6, 6) and y[[]].shape == (0,)
    mask = torch.zeros(7, dtype=torch.bool)
    mask[[1, 4]] = True
    assert torch.equal(x[mask], x[[1, 4]]) and y[torch.tensor(4)].dim() == 0
    with pytest.raises(IndexError):
        x[7]
    with pytest.raises(IndexError):
        x[torch.tensor([0, -8])]
    with pytest.raises(TypeError):
        x[torch.zeros(2, 2, dtype=torch.int64)]
    assert x.size(0) == 7 and x.dim() == 4 and x.nbytes == 7 * 72 * 4


def test_a_million_imagenet_samples_allocate_nothing_big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"name": "synthetic_images", "image_shape": [3, 224, 224], "n_samples": 1_000_000, "n_classes": 1000}
    path = tmp_path / f"{dataset_key(cfg)}.npz"
    drawn: list[tuple[int, int]] = []  # (stream, counter) of every Philox stream drawn
    raw = lazy_samples._raw

    def counted(seed: int, stream: int, counter: int, words: int) -> np.ndarray:
        drawn.append((stream, counter))
        return raw(seed, stream, counter, words)

    monkeypatch.setattr(lazy_samples, "_raw", counted)
    tracemalloc.start()
    try:
        meta = prepare(cfg, path)
        data = load(path)
        x, y, _, _ = lazy(data)
        wanted = [5, 999_999 - 250_000, 17, 0, 1, 2, 3, 400_000]
        drawn.clear()  # (prepare draws a few samples for the checksum)
        batch, labels = x[torch.tensor(wanted)], y[torch.arange(8)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert path.stat().st_size < 64 * 1024 and list(tmp_path.iterdir()) == [path]
    assert peak < 64 * 2**20, f"{peak} bytes allocated"  # one batch of 8 is 4.8 MB
    assert batch.shape == (8, 3, 224, 224) and batch.dtype == torch.float32 and labels.dtype == torch.int64
    assert x.shape == (750_000, 3, 224, 224) and int(labels.max()) < 1000
    assert meta["n_samples"] == 1_000_000 and meta["input_shape"] == [3, 224, 224] and meta["generated"] is True
    assert meta["n_train"] == 750_000 and meta["dtype"] == "float32" and len(meta["checksum"]) == 64
    # only the asked samples were generated (each from its own stream), and their classes' prototypes
    assert sorted(c for s, c in drawn if s == lazy_samples._STREAM_SAMPLES) == sorted(wanted)
    assert len([c for s, c in drawn if s == lazy_samples._STREAM_PROTOTYPES]) <= len(wanted)
    again = prepare(cfg, path)  # a valid file is kept
    assert again["checksum"] == meta["checksum"]


def test_the_checksum_detects_a_changed_generator_and_keys_are_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "g.npz"
    meta = prepare(IMAGES, path)
    monkeypatch.setattr(lazy_samples, "_SQRT12", np.float32(3.0))  # another generator, same config
    with pytest.raises(D5PipeError, match="checksum mismatch"):
        load(path)
    assert prepare(IMAGES, path)["checksum"] != meta["checksum"]  # prepared again
    monkeypatch.undo()
    # keys: the shaping keys of each name only; the existing names' keys are unchanged
    assert dataset_key({"name": "digits"}) == "digits-3ad4c698e66966a7"
    assert dataset_key({"name": "synthetic", "n_samples": 400, "n_classes": 4, "image_shape": [2, 6, 6],
                        "noise": 0.5}) == "synthetic-3438f28ed3e832cf"
    assert dataset_key({**IMAGES, "split_seed": 3, "seq_len": 9}) == dataset_key(IMAGES)
    assert dataset_key({**IMAGES, "image_shape": [2, 6, 7]}) != dataset_key(IMAGES)
    assert dataset_key({**TOKENS, "image_shape": [1, 2, 3], "noise": 2.0}) == dataset_key(TOKENS)
    assert dataset_key({**TOKENS, "seq_len": 13}) != dataset_key(TOKENS) != dataset_key({**TOKENS, "vocab_size": 99})


@pytest.mark.parametrize(("cfg", "key"), [
    ({"name": "synthetic_images"}, "dataset.image_shape"),
    ({"name": "synthetic_images", "image_shape": [3, 224]}, "dataset.image_shape"),
    ({"name": "synthetic_images", "image_shape": [3, 0, 4]}, "dataset.image_shape"),
    ({"name": "synthetic_tokens", "seq_len": 0}, "dataset.seq_len"),
    ({"name": "synthetic_tokens", "vocab_size": 1}, "dataset.vocab_size"),
    ({"name": "synthetic_tokens", "n_samples": 3}, "dataset.n_samples"),
])
def test_bad_values_are_one_line_errors_naming_the_key(cfg: dict[str, Any], key: str) -> None:
    with pytest.raises(D5PipeError) as err:
        resolve(cfg)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_plan_rejects_an_image_set_without_a_shape() -> None:
    r = d5pipe("plan", "lazy_images", "--config-dir", str(TEST_CONF), "dataset.image_shape=[]")
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert "dataset.image_shape" in line and "needs [C, H, W]" in line


@pytest.mark.slow
def test_level1_runs_the_cnn_on_generated_images_end_to_end(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "lazy_images", "--config-dir", str(TEST_CONF), "--out", str(run))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    assert set(df["status"]) == {"ok"} and df["point_id"].nunique() == 1
    assert (df.loc[df["metric"] == "inference_latency", "value"] > 0).all()
    [data_file] = (run / "data").glob("synthetic_images-*.npz")
    assert data_file.stat().st_size < 64 * 1024
    [record] = (run / "points" / "level1").glob("*.json")
    assert json.loads(record.read_text())["status"] == "ok"


def _ctx(tmp_path: Path, stage: str, cfg: dict[str, Any]) -> PointContext:
    return PointContext("t", stage, "p1", {}, {"name": "t", "seed": 0, "timer": {}, **cfg}, 3, tmp_path,
                        tmp_path / "work", tmp_path / "data", {})


@pytest.mark.slow
def test_level2_trains_on_generated_batches_and_skips_what_it_cannot(tmp_path: Path) -> None:
    from d5pipe.levels.level2.point import run_point
    from d5pipe.levels.level2.train_loop import make_loader

    data = load_for({**IMAGES, "n_samples": 200}, tmp_path / "data")
    x, y, _, _ = lazy(data)
    in_process = [(xb.clone(), yb.clone()) for xb, yb in make_loader(x, y, 32, seed=4)]
    workers = list(make_loader(x, y, 32, seed=4, num_workers=1))
    assert len(in_process) == len(workers) == 5
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(in_process, workers, strict=True))
    train = {"epochs": 2, "batch_size": 32, "lr": 0.05, "optimizer": "adam", "peak": False,
             "reference_optimizer": "adam", "reference_steps": 2, "metrics": ["macro_f1"]}
    out = run_point(_ctx(tmp_path, "level2", {"model": {"name": "mlp", "hidden": [16]},
                                              "dataset": {**IMAGES, "n_samples": 200}, "train": train}))
    values = {m.name: m.value for m in out.metrics}
    assert values["test_accuracy"] > 0.5 and values["train_steps"] == 10 and "macro_f1" in values
    assert out.extra["dataset"]["n_train"] == 150
    with pytest.raises(PointSkipped, match="token ids"):
        run_point(_ctx(tmp_path, "level2", {"model": {"name": "mlp"}, "dataset": TOKENS, "train": train}))


def test_level3_training_skips_a_generated_dataset(tmp_path: Path) -> None:
    from d5pipe.levels.level3.point import run_point

    cfg = {"model": {"name": "mlp"}, "dataset": IMAGES, "train": {},
           "distributed": {"benchmark": "train", "backend": "ddp", "ranks": 1}}
    with pytest.raises(PointSkipped, match="needs a materialised dataset"):
        run_point(_ctx(tmp_path, "level3", cfg))
