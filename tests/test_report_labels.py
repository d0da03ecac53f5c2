"""Point labels in the report when a stage has no sweep axes (e.g. one training point)."""

from __future__ import annotations

import pandas as pd

from d5pipe.results.report.frames import label_of


def test_label_falls_back_to_point_id_after_set_index() -> None:
    rows = pd.DataFrame({"point_id": ["level2-abc"], "metric": ["test_accuracy"]}).set_index("point_id")
    assert label_of(rows.loc["level2-abc"], []) == "level2-abc"
    plain = pd.Series({"point_id": "p1", "train.lr": 0.1})
    assert label_of(plain, ["train.lr"]) == "lr=0.1"
    assert label_of(plain, []) == "p1"
