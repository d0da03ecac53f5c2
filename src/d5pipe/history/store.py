"""The history store: one DuckDB file (``$D5PIPE_HISTORY``, else ``history.duckdb`` in the user's data
directory, d5pipe.core.user_dirs; ``--history PATH`` on the command line).

DuckDB lets one process at a time open a file for writing, and no other process open it meanwhile.
Every access here holds a file lock beside the database (``history.duckdb.lock``, ``filelock``) for
as long as its connection is open, so two runs finishing at the same moment both land, one after
the other, instead of one failing on DuckDB's own lock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.user_dirs import user_data_dir
from d5pipe.history.run_rows import PROFILE_COLUMNS, RESULT_COLUMNS, RUN_COLUMNS

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

ENV_VAR = "D5PIPE_HISTORY"
OFF = ("off", "none", "0", "no")
"""``D5PIPE_HISTORY=off``: finished runs are not appended (``d5pipe run --no-history`` does the same)."""
LOCK_TIMEOUT_S = 600.0
SCHEMA_VERSION = 2
"""2: series named by the point's config hash (was its sweep parameters), runs carry ``slurm_cluster``.
The ``profiles`` table (a profiled point's operators) came later within 2: a store written before it
gains it, empty, when it is next written to, and reads as holding no profiles until then."""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, experiment VARCHAR, created TIMESTAMPTZ,
  run_dir VARCHAR, hostname VARCHAR, machine VARCHAR, env_hash VARCHAR, d5pipe_version VARCHAR,
  git_commit VARCHAR, packages JSON, user_code JSON, config JSON, slurm_jobs VARCHAR, slurm_nodes VARCHAR,
  slurm_cluster VARCHAR, imported TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS results (run_id VARCHAR, experiment VARCHAR, stage VARCHAR, series VARCHAR,
  params VARCHAR, point_id VARCHAR, repeat INTEGER, metric VARCHAR, unit VARCHAR, kind VARCHAR,
  value DOUBLE, ci_low DOUBLE, ci_high DOUBLE, status VARCHAR, record VARCHAR);
CREATE INDEX IF NOT EXISTS results_series ON results (series, metric);
CREATE TABLE IF NOT EXISTS profiles (run_id VARCHAR, series VARCHAR, point_id VARCHAR, phase VARCHAR,
  operator VARCHAR, self_per_call_s DOUBLE);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');
"""


def default_path() -> Path:
    env = os.environ.get(ENV_VAR, "")
    if env and env.lower() not in OFF:
        return Path(env)
    return user_data_dir() / "history.duckdb"


def disabled_by_env() -> bool:
    return os.environ.get(ENV_VAR, "").lower() in OFF


def resolve(path: str | Path | None) -> Path:
    p = Path(path) if path else default_path()
    if p.exists() and p.is_dir():
        raise D5PipeError(f"--history {p}: a directory, not a DuckDB file")
    return p


@contextlib.contextmanager
def connect(path: Path, write: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the store, under its lock. Reading a store that does not exist is a
    one-line error; writing creates it."""
    import duckdb
    from filelock import FileLock, Timeout

    if not write and not path.is_file():
        raise D5PipeError(f"history {path}: no such store (a finished run creates it; or d5pipe history import)")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=LOCK_TIMEOUT_S)
    except Timeout as err:
        raise D5PipeError(f"history {path}: still locked by another process after {LOCK_TIMEOUT_S:.0f} s") from err
    try:
        try:
            con = duckdb.connect(str(path), read_only=not write)
        except duckdb.Error as err:
            raise D5PipeError(f"history {path}: not a DuckDB file d5pipe can open ({str(err).splitlines()[0]})") from err
        try:
            if write:
                con.execute(_SCHEMA)
            _check_version(con, path)
            yield con
        finally:
            con.close()
    finally:
        lock.release()


def _check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """One line when the store was written by a d5pipe whose rows mean something else."""
    import duckdb

    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.Error:
        row = None
    if row is None or str(row[0]) != str(SCHEMA_VERSION):
        found = "none" if row is None else row[0]
        raise D5PipeError(f"history {path}: schema_version {found}, this d5pipe reads {SCHEMA_VERSION}; "
                          "start a new store (--history FILE) and d5pipe history import the runs into it")


def append(path: Path, run: dict[str, Any], results: pd.DataFrame, profiles: pd.DataFrame | None = None) -> bool:
    """Add one run and its profiles (False: it was already there, nothing written). One
    transaction: a run lands whole or not at all."""
    import pandas as pd

    profiles = pd.DataFrame(columns=list(PROFILE_COLUMNS)) if profiles is None else profiles

    with connect(path, write=True) as con:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run["run_id"]]).fetchone():
            return False
        row = pd.DataFrame([{**run, "imported": pd.Timestamp.now(tz="UTC")}], columns=list(RUN_COLUMNS))
        row["created"] = pd.to_datetime(row["created"], utc=True, errors="coerce")
        con.execute("BEGIN")
        try:
            con.register("new_run", row)
            con.register("new_results", results[list(RESULT_COLUMNS)])
            con.register("new_profiles", profiles[list(PROFILE_COLUMNS)])
            con.execute(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) SELECT * FROM new_run")
            con.execute(f"INSERT INTO results ({', '.join(RESULT_COLUMNS)}) SELECT * FROM new_results")
            con.execute(f"INSERT INTO profiles ({', '.join(PROFILE_COLUMNS)}) SELECT * FROM new_profiles")
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        finally:
            for name in ("new_run", "new_results", "new_profiles"):
                con.unregister(name)
    return True


def add_mllog(path: Path, logs: Path) -> tuple[str, bool]:
    """Append a published MLPerf result (d5pipe.history.mllog_rows); (run_id, whether it was new)."""
    from d5pipe.history.mllog_rows import mllog_rows

    run, rows = mllog_rows(logs)
    return run["run_id"], append(path, run, rows)


def add_run_dir(path: Path, run_dir: Path) -> tuple[str, bool]:
    """Append a finished run directory; (run_id, whether it was new)."""
    from d5pipe.history.run_rows import profile_rows, run_rows

    run, rows = run_rows(run_dir)
    return run["run_id"], append(path, run, rows, profile_rows(run_dir, run["run_id"], rows))
