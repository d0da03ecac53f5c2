"""Read what a report needs from a run directory; nothing is re-run or re-measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from d5pipe import D5PipeError
from d5pipe.results.columns import FIXED_COLUMNS
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, read_record


@dataclass
class RunData:
    run_dir: Path
    results: pd.DataFrame
    """results.parquet (tidy, one row per point and metric)."""
    manifest: dict[str, Any]
    config_text: str
    config: dict[str, Any]
    reproduce: dict[str, Any] | None
    warnings: pd.DataFrame
    """stage, point_id, warning."""
    curves: pd.DataFrame
    """stage, point_id, series, step, value."""

    def stage_rows(self, stage: str) -> pd.DataFrame:
        return self.results[self.results["stage"] == stage]

    @property
    def stages(self) -> list[str]:
        return sorted(self.results["stage"].dropna().unique())

    @property
    def axis_columns(self) -> list[str]:
        return [c for c in self.results.columns if c not in FIXED_COLUMNS]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise D5PipeError(f"{path} is not valid JSON: {exc}") from exc
    return data if isinstance(data, dict) else None


def _side_tables_from_records(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Warnings and curves straight from the records (when aggregate's side tables are absent)."""
    warnings: list[tuple[str, str, str]] = []
    curves: list[tuple[str, str, str, float, float]] = []
    for path in sorted(RunDir(run_dir).points_dir.glob("*/*.json")):
        try:
            rec = read_record(path)
        except CorruptRecord:
            continue
        stage, pid = path.parent.name, path.stem
        extra = rec.get("extra") or {}
        warnings.extend((stage, pid, str(w)) for w in extra.get("warnings") or [])
        c = extra.get("curves")
        if isinstance(c, dict):
            steps = c.get("epoch") or c.get("step") or []
            for series, ys in c.items():
                if series not in ("epoch", "step") and isinstance(ys, list):
                    curves.extend((stage, pid, series, float(x), float(y)) for x, y in zip(steps, ys)
                                  if isinstance(x, (int, float)) and isinstance(y, (int, float)))
    return (pd.DataFrame(warnings, columns=["stage", "point_id", "warning"]),
            pd.DataFrame(curves, columns=["stage", "point_id", "series", "step", "value"]))


def load_run(run_dir: Path) -> RunData:
    """Load results.parquet, manifest.json, config.yaml, reproduce.json and the side tables."""
    rd = RunDir(run_dir)
    run_dir = rd.root
    results_path = rd.results_path
    if not results_path.exists():
        raise D5PipeError(f"{results_path} does not exist: run the aggregate step first")
    results = pd.read_parquet(results_path)
    config_path = rd.config_path
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else ""
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as exc:
        raise D5PipeError(f"{config_path} is not valid YAML: {exc}") from exc
    if rd.side_table("warnings").exists() and rd.side_table("curves").exists():
        warnings = pd.read_parquet(rd.side_table("warnings"))
        curves = pd.read_parquet(rd.side_table("curves"))
    else:
        warnings, curves = _side_tables_from_records(run_dir)
    return RunData(
        run_dir=run_dir,
        results=results,
        manifest=rd.manifest,
        config_text=config_text,
        config=config if isinstance(config, dict) else {},
        reproduce=_read_json(rd.reproduce_path),
        warnings=warnings,
        curves=curves,
    )
