"""The input pipeline through the real workflow (issue 38): shard workers start DataLoader workers,
every variant of storage x workers trains the same weights, decoding PNGs in the training process
stalls the steps more than gathering from memory, and the report shows the loader against the model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import TEST_CONF, d5pipe


@pytest.mark.slow
def test_storage_and_workers_train_alike_and_png_without_workers_stalls(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = d5pipe("run", "data_pipeline_small", "--config-dir", str(TEST_CONF), "--out", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    df = pd.read_parquet(run / "results.parquet")
    assert set(df["status"]) == {"ok"}
    weights = df[df.metric == "weights_sha256"]
    assert len(weights) == 4 and weights["text"].nunique() == 1  # one computation, four ways to feed it

    def stall(storage: str, workers: int) -> float:
        row = df[(df.metric == "data_stall_fraction") & (df["dataset.storage"] == storage)
                 & (df["train.num_workers"] == workers)]
        return float(row["value"].iloc[0])

    assert stall("png", 0) > stall("memory", 0)  # 64 PNG decodes a batch against one gather
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "loader_samples_per_s vs train.num_workers" in html and "data_stall_fraction" in html
