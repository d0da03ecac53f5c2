"""Questions to the history store: its runs, one metric's series for a configuration, the latest
value of every series, and the run-level values the step check reads (one value per run and
series: the median over the run's repetitions)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import pandas as pd


def runs(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> pd.DataFrame:
    sql = ("SELECT r.run_id, r.experiment, r.created, r.hostname, r.machine, r.env_hash, r.d5pipe_version, "
           "r.slurm_cluster, r.slurm_nodes, r.run_dir, (SELECT count(*) FROM results s WHERE s.run_id = r.run_id) AS rows "
           "FROM runs r")
    args: list[Any] = []
    if experiment:
        sql += " WHERE r.experiment = ?"
        args.append(experiment)
    return con.execute(sql + " ORDER BY r.created, r.run_id", args).df()


def _where(experiment: str | None, stage: str | None, metric: str | None, machine: str | None,
           env_hash: str | None, series: str | None, kind: str | None) -> tuple[str, list[Any]]:
    conds, args = ["s.status = 'ok'"], []
    for col, val in (("s.experiment", experiment), ("s.stage", stage), ("s.metric", metric), ("r.machine", machine),
                     ("r.env_hash", env_hash), ("s.series", series), ("s.kind", kind)):
        if val:
            conds.append(f"{col} = ?")
            args.append(val)
    return " AND ".join(conds), args


def run_values(con: duckdb.DuckDBPyConnection, *, experiment: str | None = None, stage: str | None = None,
               metric: str | None = None, machine: str | None = None, env_hash: str | None = None,
               series: str | None = None, kind: str | None = "timing",
               params: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per run, series and metric (and machine type): the median, lowest and highest of
    the run's repetitions, how many there were, and the run's identity, in time order."""
    where, args = _where(experiment, stage, metric, machine, env_hash, series, kind)
    df = con.execute(
        "SELECT s.experiment, s.stage, s.series, s.params, s.metric, s.unit, r.machine, s.run_id, r.created, "
        f"r.hostname, r.env_hash, median(s.value) AS value, min(s.value) AS low, max(s.value) AS high, "
        "count(*) AS repetitions "
        f"FROM results s JOIN runs r USING (run_id) WHERE {where} "
        "GROUP BY ALL ORDER BY s.series, s.metric, r.machine, r.created, s.run_id", args).df()
    if params:
        keep = [all(json.loads(p).get(k) == v for k, v in params.items()) for p in df["params"]]
        df = df[keep]
    return df.reset_index(drop=True)


def latest(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> pd.DataFrame:
    """The last run's value of every series (timings and every other numeric metric)."""
    df = run_values(con, experiment=experiment, kind=None)
    return df.groupby(["series", "metric", "machine"], sort=False).tail(1).reset_index(drop=True)


def run_rows_of(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The runs' rows by ID (packages, user code and config parsed)."""
    if not run_ids:
        return {}
    df = con.execute("SELECT * FROM runs WHERE run_id IN (SELECT unnest(?))", [run_ids]).df()
    out = {}
    for rec in df.to_dict("records"):
        for k in ("packages", "user_code", "config"):
            rec[k] = json.loads(rec[k]) if isinstance(rec.get(k), str) and rec[k] else {}
        out[str(rec["run_id"])] = rec
    return out


SERIES_KEY = ["series", "metric", "machine"]
CHUNK_VECTORS = 32
"""Rows fetched at a time by :func:`series_groups` (DuckDB vectors of 2,048 rows)."""


def series_info(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> dict[tuple[str, str], Any]:
    """What names each timing series: its experiment, stage, parameters and unit."""
    where, args = _where(experiment, None, None, None, None, None, "timing")
    df = con.execute("SELECT DISTINCT s.series, s.metric, s.experiment, s.stage, s.params, s.unit "
                     f"FROM results s JOIN runs r USING (run_id) WHERE {where}", args).df()
    return {(str(r.series), str(r.metric)): r for r in df.itertuples(index=False)}


def series_groups(con: duckdb.DuckDBPyConnection, experiment: str | None = None
                  ) -> Iterator[tuple[tuple[str, str, str], pd.DataFrame]]:
    """Each timing series of each machine type, one at a time in time order (run, created, and the
    lowest and highest value of the run's repetitions), streamed from the store: a history larger
    than memory is checked series by series."""
    import pandas as pd

    where, args = _where(experiment, None, None, None, None, None, "timing")
    cur = con.execute(
        "SELECT s.series, s.metric, r.machine, s.run_id, r.created, min(s.value) AS low, max(s.value) AS high "
        f"FROM results s JOIN runs r USING (run_id) WHERE {where} AND s.value > 0 "
        "GROUP BY ALL ORDER BY s.series, s.metric, r.machine, r.created, s.run_id", args)
    carry: pd.DataFrame | None = None
    while True:
        chunk = cur.fetch_df_chunk(CHUNK_VECTORS)
        if chunk.empty:
            break
        if carry is not None and len(carry):
            chunk = pd.concat([carry, chunk], ignore_index=True)
        last = chunk.iloc[-1]
        tail = (chunk["series"] == last["series"]) & (chunk["metric"] == last["metric"]) & \
               (chunk["machine"] == last["machine"])
        carry = chunk[tail]
        for key, g in chunk[~tail].groupby(SERIES_KEY, sort=False):
            yield (str(key[0]), str(key[1]), str(key[2])), g.reset_index(drop=True)
    if carry is not None and len(carry):
        first = carry.iloc[0]
        yield (str(first["series"]), str(first["metric"]), str(first["machine"])), carry.reset_index(drop=True)


def series_profiles(con: duckdb.DuckDBPyConnection, series: str, run_ids: Sequence[str]) -> pd.DataFrame:
    """The profiled operators of one series in ``run_ids``: per (phase, operator), the median over
    those runs' points of the self seconds per call (d5pipe.results.profiles.by_operator's columns);
    empty where no run was profiled, or the store predates profiles."""
    import pandas as pd

    tables = con.execute("SELECT 1 FROM information_schema.tables WHERE table_name = 'profiles'").fetchone()
    if not tables or not run_ids:
        return pd.DataFrame(columns=["phase", "operator", "self_per_call_s"])
    marks = ", ".join("?" * len(run_ids))
    return con.execute("SELECT phase, operator, median(self_per_call_s) AS self_per_call_s FROM profiles "
                       f"WHERE series = ? AND run_id IN ({marks}) GROUP BY ALL ORDER BY phase, operator",
                       [series, *run_ids]).df()
