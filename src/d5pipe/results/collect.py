"""A run's point records read once, into the columns of ``results.parquet`` and its side data.

:func:`collect` reads each record once and returns the tidy table (one row per point and metric,
with the columns of docs/architecture.md)::

    experiment, stage, point_id, metric, value, text, unit, kind, ci_low, ci_high,
    status, error, seed, env_hash, <one column per sweep axis, dotted key as name>

and what else the records hold that the results need (:class:`Collected`): warnings, curves and
each metric's raw samples. d5pipe.results.run_results adds the checks and verdicts and writes the
files, once.

* ``value`` holds numbers (bools as 1.0/0.0); ``text`` holds string values (and "true"/"false"
  for bools), so a verdict ``pass`` is ``value=NaN, text="pass"``.
* ``error`` is the point's error text, or, on a row whose metric has a ``detail`` (the evidence
  of a check, d5pipe.core.outcome.Metric), that detail.
* A failed or skipped point gives exactly one row, metric ``status``, with its error text;
  an ``ok`` point without metrics gives one ``status`` row too, so no point disappears.
* A planned point (``point_ids``) without a record gives a ``skipped`` row whose error says so.
* An axis whose dotted key equals a fixed column name (e.g. sweeping ``seed``) is stored as
  ``axis:<key>``.

Scale: per record the work is one ``json.loads`` plus C-level ``map(itemgetter)`` over its
metrics; everything per row after that is done by pyarrow (see benchmarks/bench_aggregate.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from d5pipe.core.errors import D5PipeError
from d5pipe.results.columns import axis_column_name, stage_axes
from d5pipe.results.profiles import profile_rows
from d5pipe.results.verdicts import NOT_RUN_PREFIX
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import CorruptRecord, parse_record

SampleSource = Callable[[str, str, str], Sequence[float] | None]
"""(stage, point_id, metric) -> that metric's raw samples, or None."""

_METRIC_FIELDS = ("name", "value", "unit", "kind", "ci_low", "ci_high", "detail")


@dataclass
class Collected:
    """Column buffers: per point (expanded later by index) and per metric row; the side data."""

    experiment: list[str | None] = field(default_factory=list)
    stage: list[str] = field(default_factory=list)
    point_id: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    error: list[str | None] = field(default_factory=list)
    seed: list[int | None] = field(default_factory=list)
    env_hash: list[str | None] = field(default_factory=list)
    slurm_job_id: list[str | None] = field(default_factory=list)
    params: list[dict[str, Any]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    n_rows: int = 0
    metric: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in _METRIC_FIELDS})
    """Metric field -> one entry per metric row."""
    warnings: list[tuple[str, str, str]] = field(default_factory=list)
    curves: list[tuple[str, str, str, float, float]] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    """Rows of the records' profiled passes (d5pipe.results.profiles)."""
    samples: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict)
    """(stage, point_id) -> metric name -> the raw samples that metric summarises."""

    def sample_source(self) -> Callable[[str, str, str], list[float] | None]:
        """(stage, point_id, metric) -> raw samples (:data:`SampleSource`)."""
        return lambda stage, point_id, metric: self.samples.get((stage, point_id), {}).get(metric)


_STATUS_ROW = {"name": "status", "value": None, "unit": "", "kind": "info", "ci_low": None, "ci_high": None}
_GETTERS = [(k, methodcaller("get", k) if k == "detail" else itemgetter(k)) for k in _METRIC_FIELDS]
"""``detail`` is optional (d5pipe.core.outcome.Metric): most metrics have none."""


def _record_files(run_dir: Path, point_ids: dict[str, list[str]] | None) -> Iterator[tuple[str, str, Path]]:
    """(stage, point_id, path) of the records to read, sorted by stage and point ID."""
    points_dir = RunDir.of(run_dir).points_dir
    if point_ids is not None:
        for stage in sorted(point_ids):
            for pid in sorted(point_ids[stage]):
                yield stage, pid, points_dir / stage / f"{pid}.json"
        return
    if not points_dir.is_dir():
        return
    for stage in sorted(e.name for e in os.scandir(points_dir) if e.is_dir()):
        names = sorted(
            e.name for e in os.scandir(points_dir / stage)
            if e.name.endswith(".json") and not e.name.startswith(".")
        )
        for name in names:
            yield stage, name[:-5], points_dir / stage / name


def metric_samples(rec: dict[str, Any]) -> dict[str, list[float]]:
    """Metric name -> the raw samples it summarises (its ``samples`` key into the record's samples)."""
    raw = rec.get("samples")
    if not raw or rec.get("status", "ok") != "ok":
        return {}
    out = {}
    for m in rec.get("metrics") or ():
        values = raw.get(m.get("samples")) if isinstance(m, dict) and m.get("samples") else None
        if isinstance(values, list) and values and "name" in m:
            out[str(m["name"])] = [float(x) for x in values if isinstance(x, (int, float))]
    return out


def _add_point(cols: Collected, stage: str, pid: str, rec: dict[str, Any]) -> None:
    status = rec.get("status") or "ok"
    if status not in ("ok", "failed", "skipped"):
        status = "failed"
    metrics = (rec.get("metrics") if status == "ok" else None) or [_STATUS_ROW]
    cols.experiment.append(rec.get("experiment"))
    cols.stage.append(stage)
    cols.point_id.append(pid)
    cols.status.append(status)
    error = rec.get("error")
    cols.error.append(None if error is None else str(error))
    seed = rec.get("seed")
    cols.seed.append(seed if isinstance(seed, int) else None)
    cols.env_hash.append(rec.get("env_hash"))
    job = (rec.get("provenance") or {}).get("slurm_job_id")
    cols.slurm_job_id.append(None if job is None else str(job))
    cols.params.append(rec.get("params") or {})
    out = cols.metric
    try:
        for key, getter in _GETTERS:
            out[key].extend(map(getter, metrics))
    except (KeyError, TypeError, AttributeError):  # a metric lacks a field: undo this point's partial rows
        for key in _METRIC_FIELDS:
            del out[key][cols.n_rows:]
            out[key].extend(m.get(key) if isinstance(m, dict) else None for m in metrics)
    cols.counts.append(len(metrics))
    cols.n_rows += len(metrics)
    samples = metric_samples(rec)
    if samples:
        cols.samples[(stage, pid)] = samples
    extra = rec.get("extra")
    if extra:
        for w in extra.get("warnings") or ():
            cols.warnings.append((stage, pid, str(w)))
        if "profile" in extra:
            cols.profiles += profile_rows(stage, pid, rec.get("params") or {}, extra["profile"])
        curves = extra.get("curves")
        if isinstance(curves, dict):
            steps = curves.get("epoch") or curves.get("step") or []
            for series, ys in curves.items():
                if series in ("epoch", "step") or not isinstance(ys, list):
                    continue
                for x, y in zip(steps, ys):
                    if isinstance(y, (int, float)) and isinstance(x, (int, float)):
                        cols.curves.append((stage, pid, series, float(x), float(y)))


def _read_all(run_dir: Path, point_ids: dict[str, list[str]] | None) -> Collected:
    cols = Collected()
    for stage, pid, path in _record_files(run_dir, point_ids):
        try:
            with open(path, "rb") as fh:
                rec = parse_record(fh.read(), str(path))  # an unknown schema_version is an error
        except FileNotFoundError:
            if point_ids is None:
                continue  # removed while listing
            rec = {"status": "skipped",
                   "error": f"{NOT_RUN_PREFIX} no record {path.relative_to(run_dir)} (its shard job did not finish)"}
        except CorruptRecord as exc:
            rec = {"status": "failed", "error": str(exc)}
        _add_point(cols, stage, pid, rec)
    return cols


def _value_and_text(values: list[Any]) -> tuple[pa.Array, pa.Array]:
    """Split mixed metric values into a float64 column and a string column."""
    num = [v if type(v) is float or type(v) is int else (float(v) if type(v) is bool else None)
           for v in values]
    text = [None if v is None or type(v) is float or type(v) is int
            else ("true" if v else "false") if type(v) is bool
            else v if type(v) is str else json.dumps(v, default=str)
            for v in values]
    return pa.array(num, type=pa.float64()), pa.array(text, type=pa.string())


def _array(values: list[Any], kind: pa.DataType) -> pa.Array:
    """A string or float64 column; when some value is of another type, such values become nulls."""
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        fits = str if kind == pa.string() else (int, float)
        return pa.array([v if isinstance(v, fits) else None for v in values], type=kind)


def _axis_array(values: list[Any]) -> pa.Array:
    """One axis column: native type when consistent, else JSON text."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} and float in kinds:
        return pa.array(values, type=pa.float64())
    if kinds == {int}:
        return pa.array(values, type=pa.int64())
    if len(kinds) <= 1 and kinds <= {str, bool}:
        return pa.array(values)
    return pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True)
                     for v in values], type=pa.string())


def _build_table(cols: Collected) -> pa.Table:
    idx = pa.array(np.repeat(np.arange(len(cols.counts), dtype=np.int64), cols.counts))
    m = cols.metric
    names = _array(m["name"], pa.string())
    value_arr, text_arr = _value_and_text(m["value"])
    status_text = pa.array(cols.status, type=pa.string()).take(idx)
    is_status_row = pc.equal(names, "status")
    text_arr = pc.if_else(
        pc.and_(is_status_row, pc.is_null(text_arr)), status_text, text_arr
    )
    data: dict[str, pa.Array] = {
        "experiment": pa.array(cols.experiment, type=pa.string()).take(idx),
        "stage": pa.array(cols.stage, type=pa.string()).take(idx),
        "point_id": pa.array(cols.point_id, type=pa.string()).take(idx),
        "metric": names,
        "value": value_arr,
        "text": text_arr,
        "unit": pc.fill_null(_array(m["unit"], pa.string()), ""),
        "kind": pc.fill_null(_array(m["kind"], pa.string()), ""),
        "ci_low": _array(m["ci_low"], pa.float64()),
        "ci_high": _array(m["ci_high"], pa.float64()),
        "status": status_text,
        # a metric's own detail (a check's evidence) where it has one, else its point's error
        "error": pc.coalesce(_array(m["detail"], pa.string()), pa.array(cols.error, type=pa.string()).take(idx)),
        "seed": pa.array(cols.seed, type=pa.int64()).take(idx),
        "env_hash": pa.array(cols.env_hash, type=pa.string()).take(idx),
        "slurm_job_id": pa.array(cols.slurm_job_id, type=pa.string()).take(idx),
    }
    for key in sorted(set().union(*cols.params)):  # every axis any point has
        data[axis_column_name(key)] = _axis_array([p.get(key) for p in cols.params]).take(idx)
    return pa.table(data)


def stage_summary(results: pd.DataFrame, stage: str) -> pd.DataFrame:
    """One row per point of ``stage``: point_id, status, verdict, error, seed, axes, one column per
    metric (``summary_<stage>.parquet``).

    Numeric metrics give their value, string metrics their text; a metric named like a fixed or
    axis column is stored as ``metric:<name>``.
    """
    df = results[results["stage"] == stage]
    axis_cols = stage_axes(df)
    point_cols = ["point_id", "status", *(["verdict"] if "verdict" in df.columns else []), "error", "seed"]
    base = df.drop_duplicates("point_id")[[*point_cols, *axis_cols]]
    base = base.set_index("point_id")
    metrics = df[df["metric"] != "status"]
    if not metrics.empty:
        numeric = metrics.pivot_table(index="point_id", columns="metric", values="value", aggfunc="first")
        texts = metrics[metrics["text"].notna() & metrics["value"].isna()]
        if not texts.empty:
            text_wide = texts.pivot_table(index="point_id", columns="metric", values="text", aggfunc="first")
            numeric = numeric.drop(columns=[c for c in text_wide.columns if c in numeric.columns])
            numeric = numeric.join(text_wide, how="outer")
        taken = set(base.columns) | {"point_id"}
        numeric.columns = [f"metric:{c}" if c in taken else str(c) for c in numeric.columns]
        base = base.join(numeric, how="left")
    return base.reset_index()


def collect(run_dir: Path, point_ids: dict[str, list[str]] | None = None) -> tuple[pa.Table, Collected]:
    """The results table of the run's records, and the side data read with it (each record once).

    ``point_ids`` (stage -> planned IDs) restricts the records read to the planned points; a
    planned point without a record becomes a ``skipped`` row."""
    if not Path(run_dir).is_dir():
        raise D5PipeError(f"run directory {run_dir} does not exist")
    cols = _read_all(Path(run_dir), point_ids)
    return _build_table(cols), cols
