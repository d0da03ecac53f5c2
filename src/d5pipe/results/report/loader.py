"""Read what a report needs from a run directory; nothing is re-run or re-measured.

The results are re-checked on load (d5pipe.results.finalize.with_checks: acceptance with the
current config, plausibility, verdicts), so the report says what ``d5pipe status`` says even for a
results.parquet written by an older d5pipe or straight by d5pipe.results.aggregate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from d5pipe.core.errors import D5PipeError
from d5pipe.core.yamlio import safe_load
from d5pipe.results.comparisons import SampleSource, record_samples
from d5pipe.results.finalize import with_checks
from d5pipe.results.report.frames import NON_AXIS_COLUMNS
from d5pipe.results.verdicts import point_verdicts
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
    verdicts: pd.DataFrame
    """One row per point: stage, point_id, status, verdict, reason (d5pipe.results.verdicts)."""
    samples: SampleSource
    """(stage, point_id, metric) -> raw samples from the point record, or None."""
    comparisons: pd.DataFrame | None = None
    """``comparisons.parquet`` written with these results (d5pipe.results.finalize), else None:
    the report computes the pairs itself."""

    def stage_rows(self, stage: str) -> pd.DataFrame:
        return self.results[self.results["stage"] == stage]

    @property
    def stages(self) -> list[str]:
        return sorted(self.results["stage"].dropna().unique())

    @property
    def axis_columns(self) -> list[str]:
        return [c for c in self.results.columns if c not in NON_AXIS_COLUMNS]

    @cached_property
    def _point_rows(self) -> pd.DataFrame:
        return self.results.drop_duplicates(["stage", "point_id"]).set_index(["stage", "point_id"])

    @cached_property
    def _axis_values(self) -> tuple[dict[tuple[str, str], int], list[str], Any]:
        """(point key -> row, axis names, the points' axis values as one object array): one
        lookup per :meth:`params_of` call instead of a pandas ``.loc``."""
        axes = self.axis_columns
        rows = self._point_rows
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


def _read_results(path: Path) -> pd.DataFrame:
    """results.parquet with integer axes as nullable ``Int64`` (never floats with ``.0``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise D5PipeError(f"{path}: unreadable Parquet ({type(exc).__name__}: {exc})") from exc
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def load_run(run_dir: Path, checked: bool = False) -> RunData:
    """Load results.parquet, manifest.json, config.yaml, reproduce.json and the side tables.

    ``checked``: results.parquet was just written with this config's checks (the report job,
    right after d5pipe.results.finalize.finalize_results): not re-checked."""
    rd = RunDir(run_dir)
    run_dir = rd.root
    results_path = rd.results_path
    if not results_path.exists():
        raise D5PipeError(f"{results_path} does not exist: run the aggregate step first")
    results = _read_results(results_path)
    config_path = rd.config_path
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else ""
    try:
        config = safe_load(config_text) or {}
    except yaml.YAMLError as exc:
        raise D5PipeError(f"{config_path} is not valid YAML: {exc}") from exc
    if not checked:
        results = with_checks(results, config if isinstance(config, dict) else {})
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
        verdicts=point_verdicts(results),
        samples=record_samples(run_dir),
        comparisons=pd.read_parquet(rd.side_table("comparisons"))
        if checked and rd.side_table("comparisons").exists() else None,
    )
