"""d5pipe.levels.datasets: keys, seeded splits, atomic one-time materialisation, checksums, loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from d5pipe import D5PipeError
from d5pipe.levels.datasets import dataset_key, load, prepare

DIGITS = {"name": "digits", "test_fraction": 0.25, "split_seed": 0}
SYNTH = {"name": "synthetic", "n_samples": 400, "n_classes": 4, "image_shape": [2, 6, 6], "noise": 0.5}


def test_key_is_stable_and_ignores_keys_that_do_not_shape_the_data() -> None:
    a = dataset_key({"name": "digits", "split_seed": 0, "test_fraction": 0.25})
    b = dataset_key({"test_fraction": 0.25, "split_seed": 0, "name": "digits", "n_samples": 99})
    assert a == b and a.startswith("digits-") and len(a) == len("digits-") + 16
    assert dataset_key({**DIGITS, "split_seed": 1}) != a
    assert dataset_key({**SYNTH, "n_samples": 401}) != dataset_key(SYNTH)


def test_prepare_once_then_reuse_without_rebuilding(tmp_path: Path) -> None:
    path = tmp_path / f"{dataset_key(DIGITS)}.npz"
    meta = prepare(DIGITS, path)
    assert len(meta["checksum"]) == 64 and int(meta["checksum"], 16) >= 0
    assert meta["n_train"] + meta["n_test"] == 1797 and meta["key"] == dataset_key(DIGITS)
    st = path.stat()
    meta2 = prepare(DIGITS, path)
    st2 = path.stat()
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert meta2["checksum"] == meta["checksum"]
    assert not list(tmp_path.glob(".*.tmp")), "atomic write left a temp file"


def test_invalid_existing_file_is_rebuilt_with_the_same_checksum(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    meta = prepare(DIGITS, path)
    path.write_bytes(b"not a zip file")
    meta2 = prepare(DIGITS, path)
    assert meta2["checksum"] == meta["checksum"]
    assert load(path).meta["checksum"] == meta["checksum"]
    # a file holding another dataset config is not taken for this one
    other = {**DIGITS, "split_seed": 3}
    meta3 = prepare(other, path)
    assert meta3["key"] == dataset_key(other) and meta3["checksum"] != meta["checksum"]


def test_digits_split_is_seeded_stratified_and_image_shaped(tmp_path: Path) -> None:
    prepare(DIGITS, tmp_path / "a.npz")
    prepare({**DIGITS, "split_seed": 1}, tmp_path / "b.npz")
    a, b = load(tmp_path / "a.npz"), load(tmp_path / "b.npz")
    assert a.input_shape == (1, 8, 8) and a.n_classes == 10
    assert tuple(a.x_train.shape[1:]) == (1, 8, 8) and a.x_train.dtype == torch.float32
    assert a.y_train.dtype == torch.int64
    assert float(a.x_train.max()) <= 1.0 and float(a.x_train.min()) >= 0.0
    counts = torch.bincount(a.y_test, minlength=10)
    assert int(counts.min()) >= 40  # every class in the test split (~45 each)
    assert not torch.equal(a.y_test, b.y_test)


def test_synthetic_is_seeded_and_learnable(tmp_path: Path) -> None:
    m1 = prepare(SYNTH, tmp_path / "s1.npz")
    m2 = prepare(SYNTH, tmp_path / "s2.npz")
    m3 = prepare({**SYNTH, "generator_seed": 5}, tmp_path / "s3.npz")
    assert m1["checksum"] == m2["checksum"] != m3["checksum"]
    ds = load(tmp_path / "s1.npz")
    assert ds.input_shape == (2, 6, 6) and ds.n_classes == 4
    # nearest class mean (fit on train) must beat chance (0.25) by far on test
    xtr = ds.x_train.flatten(1).numpy()
    means = np.stack([xtr[ds.y_train.numpy() == c].mean(0) for c in range(4)])
    dist = ((ds.x_test.flatten(1).numpy()[:, None, :] - means[None]) ** 2).sum(-1)
    acc = float((dist.argmin(1) == ds.y_test.numpy()).mean())
    assert acc > 0.9


def test_bundled_tabular_dataset_is_standardised(tmp_path: Path) -> None:
    meta = prepare({"name": "breast_cancer"}, tmp_path / "bc.npz")
    ds = load(tmp_path / "bc.npz")
    assert ds.input_shape == (30,) and ds.n_classes == 2 and meta["n_train"] + meta["n_test"] == 569
    assert torch.allclose(ds.x_train.mean(0), torch.zeros(30), atol=1e-4)


def test_user_errors_name_the_key_or_file(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="dataset.name"):
        dataset_key({"name": "imagenet"})
    with pytest.raises(D5PipeError, match="unknown key"):
        dataset_key({"name": "digits", "colour": 1})
    with pytest.raises(D5PipeError, match="does not exist"):
        load(tmp_path / "missing.npz")
    path = tmp_path / "d.npz"
    prepare(DIGITS, path)
    with np.load(path) as npz:
        arrays = {k: np.array(npz[k]) for k in npz.files}
    arrays["y_test"][0] = (arrays["y_test"][0] + 1) % 10
    np.savez(path, **arrays)
    with pytest.raises(D5PipeError, match="checksum mismatch"):
        load(path)
