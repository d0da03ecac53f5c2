"""What a report shows of a run: its results (d5pipe.results.run_results, one pass over the
records), with the manifest, the config as written and the reproduction verdict; nothing is
re-run, re-measured or computed a second time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from d5pipe.core.errors import D5PipeError
from d5pipe.results.columns import axis_columns
from d5pipe.results.run_results import RunResults


@dataclass
class RunData:
    res: RunResults
    """The one results pass: the verdicts, warnings, curves, side-by-side pairs and profiles it holds."""
    manifest: dict[str, Any]
    config_text: str
    config: dict[str, Any]
    reproduce: dict[str, Any] | None

    @property
    def results(self) -> pd.DataFrame:
        """results.parquet (tidy, one row per point and metric)."""
        return self.res.frame

    def stage_rows(self, stage: str) -> pd.DataFrame:
        return self.results[self.results["stage"] == stage]

    @property
    def stages(self) -> list[str]:
        return sorted(self.results["stage"].dropna().unique())

    @cached_property
    def _axis_values(self) -> tuple[dict[tuple[str, str], int], list[str], Any]:
        """(point key -> row, axis names, the points' axis values as one object array): one
        lookup per :meth:`params_of` call instead of a pandas ``.loc``."""
        axes = axis_columns(self.results.columns)
        rows = self.results.drop_duplicates(["stage", "point_id"]).set_index(["stage", "point_id"])
        return ({key: i for i, key in enumerate(rows.index)}, axes, rows[axes].to_numpy(dtype=object))

    def params_of(self, stage: str, point_id: str) -> dict[str, object]:
        """The point's sweep-axis values (only the axes it has)."""
        index, axes, values = self._axis_values
        i = index.get((stage, point_id))
        if i is None:
            return {}
        return {a: v for a, v in zip(axes, values[i]) if not pd.isna(v)}


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise D5PipeError(f"{path} is not valid JSON: {exc}") from exc
    return data if isinstance(data, dict) else None


def report_data(res: RunResults) -> RunData:
    """The report's view of ``res``: its results plus manifest.json, config.yaml and reproduce.json."""
    rd = res.run_dir
    config_text = rd.config_text if rd.config_path.exists() else ""
    return RunData(res=res, manifest=rd.manifest, config_text=config_text, config=rd.config if config_text else {},
                   reproduce=_read_json(rd.reproduce_path))
