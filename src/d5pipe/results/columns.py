"""The one definition of ``results.parquet``'s columns (d5pipe.results.run_results writes it),
and its one reader, :func:`load_results`.

One row per (point, metric)::

    experiment, stage, point_id, metric, value, text, unit, kind, ci_low, ci_high,
    status, error, seed, env_hash, <one column per sweep axis, dotted key as name>

* ``value`` holds numbers (bools as 1.0/0.0); ``text`` holds string values (and "true"/"false"
  for bools), so a verdict ``pass`` is ``value=NaN, text="pass"``.
* An axis whose dotted key equals a fixed column name (e.g. sweeping ``seed``) is stored as
  ``axis:<key>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.rundir.layout import RESULTS_FILE

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

FIXED_COLUMNS: tuple[str, ...] = (
    "experiment", "stage", "point_id", "metric", "value", "text", "unit", "kind",
    "ci_low", "ci_high", "status", "error", "seed", "env_hash",
)
"""Columns every results table has, in this order; sweep axes follow."""

POINT_INFO_COLUMNS: tuple[str, ...] = (
    "verdict", "slurm_job_id", "slurm_state", "slurm_elapsed_s", "slurm_cpu_s", "slurm_maxrss_mb",
    "slurm_req_mem_mb", "slurm_alloc_cpus", "slurm_nodes", "slurm_cpu_efficiency", "slurm_mem_efficiency",
)
"""Columns derived after aggregation: the point's verdict (d5pipe.results.verdicts) and its SLURM
job's accounting (d5pipe.results.accounting). Neither is a sweep axis."""

NON_AXIS_COLUMNS: frozenset[str] = frozenset({*FIXED_COLUMNS, *POINT_INFO_COLUMNS, "schema_version"})


def axis_columns(columns: Iterable[Any]) -> list[str]:
    """The sweep-axis columns among ``columns`` (a DataFrame's or any iterable of names)."""
    return [str(c) for c in columns if str(c) not in NON_AXIS_COLUMNS]


def stage_axes(rows: pd.DataFrame) -> list[str]:
    """The axis columns with a value for some row of ``rows`` (a stage's rows: the axes it sweeps)."""
    return [c for c in axis_columns(rows.columns) if rows[c].notna().any()]


METRIC_COLUMNS: frozenset[str] = frozenset(
    {"metric", "value", "text", "unit", "kind", "ci_low", "ci_high", "status", "error"})
"""Columns that describe one metric row; every other column describes the point."""


COMPARISON_PREFIXES = ("speedup:", "speedup_p:")
"""Metrics of a variant's points that carry its side-by-side comparison (``speedup:<metric>``:
speedup over the baseline with its CI, text the verdict; ``speedup_p:<metric>``: the p-value;
d5pipe.results.run_results.with_comparison_rows)."""


def axis_column_name(key: str) -> str:
    """The column name of sweep axis ``key`` in results.parquet."""
    return f"axis:{key}" if key in FIXED_COLUMNS else key


REQUIRED_COLUMNS = frozenset({"stage", "point_id", "metric", "value", "status"})


def load_results(run_dir: str | Path) -> pd.DataFrame:
    """``RUN/results.parquet`` (a run directory or the file) as a pandas DataFrame, integer axes
    as nullable ``Int64`` (never floats with ``.0``). A missing, unreadable or foreign file is a
    one-line D5PipeError."""
    import pyarrow.parquet as pq

    from d5pipe.core.errors import D5PipeError

    path = Path(run_dir)
    path = path / RESULTS_FILE if path.is_dir() else path
    if not path.is_file():
        raise D5PipeError(f"{path}: not found (is {path.parent} a finished run directory?)")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise D5PipeError(f"{path}: unreadable Parquet ({type(exc).__name__}: {exc})") from exc
    missing = REQUIRED_COLUMNS - set(table.column_names)
    if missing:
        raise D5PipeError(f"{path}: missing columns {sorted(missing)}")
    return to_frame(table)


def to_frame(table: pa.Table) -> pd.DataFrame:
    """A results table as pandas, integer columns as nullable ``Int64`` (never floats with ``.0``)."""
    import pandas as pd
    import pyarrow as pa

    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def is_missing(v: Any) -> bool:
    """None, NaN, ``pd.NA`` or ``NaT``: a cell of the results table without a value."""
    if v is None:
        return True
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def row_params(row: Any, axes: Iterable[str]) -> dict[str, Any]:
    """A results row's sweep parameters: its value on each of ``axes`` that has one, as a plain
    Python value (numpy scalars unwrapped), the way points are matched across runs."""
    return {a: (v.item() if hasattr(v, "item") else v) for a in axes if not is_missing(v := row[a])}
