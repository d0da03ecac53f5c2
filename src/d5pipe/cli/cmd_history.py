"""``d5pipe history ACTION``: the results of every finished run, kept in a DuckDB store
(d5pipe.history).

    d5pipe history import RUN_OR_BUNDLE...     add existing runs (run directories or bundles)
    d5pipe history runs [--experiment E]       the runs in the store
    d5pipe history series --metric M [--stage S] [--param K=V ...] [--machine F] [--env H]
    d5pipe history latest [--experiment E]     the last value of every series
    d5pipe history check [--since DATE] [--fail-on-regression PCT] [--junit FILE]
    d5pipe history trend [--html FILE]         the trend page: findings first, a plot per series
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from d5pipe.cli.arguments import key_values, percent_or_zero
from d5pipe.core.errors import D5PipeError

ACTIONS = ("import", "runs", "series", "latest", "check", "trend")


def _since(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--since {text!r}: not an ISO date (2026-12-01 or 2026-12-01T12:00)") from err


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("paths", nargs="*", type=Path,
                   help="import: run directories or bundles, or MLPerf-format logs (a file, or a directory of one "
                        "result's logs)")
    p.add_argument("--history", type=Path, metavar="FILE",
                   help="the store (default $D5PIPE_HISTORY, else ~/.local/share/d5pipe/history.duckdb)")
    p.add_argument("--experiment")
    p.add_argument("--stage")
    p.add_argument("--metric")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="series: a sweep parameter's value (repeatable; values are YAML scalars)")
    p.add_argument("--machine", help="a machine fingerprint (d5pipe history runs shows them)")
    p.add_argument("--env", help="an environment hash")
    p.add_argument("--since", type=_since, help="check: only steps whose first run after is at or after DATE")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="check: exit 4 on a confirmed regression of more than PCT percent")
    p.add_argument("--fail-on-inconclusive", action="store_true", help="check: exit 5 when a series is inconclusive")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--min-step", type=float, default=10.0, metavar="PCT",
                   help="the smallest step a series must be able to show to be called steady (default 10)")
    p.add_argument("--threshold", type=percent_or_zero, default=5.0, metavar="PCT",
                   help="check: confirmed steps smaller than PCT percent are not reported (default 5; "
                        "d5pipe.history.steps)")
    p.add_argument("--junit", type=Path, metavar="FILE", help="check: write each series as a JUnit test case")
    p.add_argument("--html", type=Path, metavar="FILE", help="trend: where to write the page (default history.html)")
    p.add_argument("--max-plots", type=int, default=60)


def _params(items: list[str]) -> dict[str, Any]:
    """``--param KEY=VALUE`` items, each value read as YAML (``16`` an integer)."""
    import yaml

    return {key: yaml.safe_load(val) for key, val in key_values(items, "--param").items()}


def _print_frame(df: Any, columns: list[str]) -> None:
    print("(none)" if df.empty else df[columns].to_string(index=False))


def main(args: argparse.Namespace) -> int:
    from d5pipe.history import queries, store

    path = store.resolve(args.history)
    if args.action == "import":
        return _import(path, args.paths)
    if args.paths:
        raise D5PipeError(f"history {args.action}: takes no paths (did you mean d5pipe history import?)")
    if not 0 < args.alpha < 1:
        raise D5PipeError(f"--alpha {args.alpha}: must be between 0 and 1")
    with store.connect(path) as con:
        if args.action == "runs":
            _print_frame(queries.runs(con, args.experiment),
                         ["run_id", "experiment", "created", "hostname", "machine", "env_hash", "rows", "run_dir"])
            return 0
        if args.action == "series":
            if not args.metric:
                raise D5PipeError("history series: --metric is required (e.g. --metric time)")
            df = queries.run_values(con, experiment=args.experiment, stage=args.stage, metric=args.metric,
                                    machine=args.machine, env_hash=args.env, kind=None, params=_params(args.param))
            _print_frame(df, ["created", "run_id", "stage", "params", "metric", "value", "low", "high", "unit",
                              "repetitions", "machine", "env_hash"])
            return 0
        if args.action == "latest":
            _print_frame(queries.latest(con, args.experiment),
                         ["stage", "params", "metric", "value", "unit", "created", "run_id", "machine"])
            return 0
        from d5pipe.history.check import check_history

        result = check_history(con, experiment=args.experiment, since=args.since, alpha=args.alpha,
                               min_step=args.min_step / 100, threshold=args.threshold / 100)
        if args.action == "trend":
            from d5pipe.history.trend_page import write_trend_page

            n_runs = len(queries.runs(con, args.experiment))
            out = write_trend_page(args.html or Path("history.html"), result,
                                   lambda s: queries.run_values(con, series=s.series, metric=s.metric), str(path),
                                   n_runs, args.max_plots)
            print(f"trend page: {out.resolve()}")
            return 0
    return _report_check(result, args)


def _report_check(result: Any, args: argparse.Namespace) -> int:
    from d5pipe.core.atomic import write_bytes
    from d5pipe.history.check import junit_xml

    for f in result.findings:
        print(f.line())
    for s in result.series:
        if s.check.status == "inconclusive":
            need = f"; ~{s.check.needed} runs per side would decide" if s.check.needed else ""
            print(f"inconclusive: {s.experiment} {s.stage} {s.params} {s.metric} @{s.machine} "
                  f"({s.check.runs} runs): {s.check.note}{need}")
        elif s.check.status == "steady" and s.check.small:
            print(f"steady: {s.experiment} {s.stage} {s.params} {s.metric} @{s.machine}: {s.check.note}")
    c = result.counts()
    print(f"d5pipe history: {c['series']} series; {len(result.findings)} step(s) found "
          f"({sum(f.regression for f in result.findings)} regression(s)), {c['inconclusive']} inconclusive, "
          f"{c['steady']} steady")
    if args.junit:
        write_bytes(args.junit, junit_xml(result, args.fail_on_regression))
    if args.fail_on_regression is not None and any(
            f.regression and f.slowdown * 100 > args.fail_on_regression for f in result.findings):
        return 4
    if args.fail_on_inconclusive and c["inconclusive"]:
        return 5
    return 0


def _import(path: Path, paths: list[Path]) -> int:
    from d5pipe.history.store import add_mllog, add_run_dir
    from d5pipe.provenance.bundle import is_archive, opened_bundle, verify
    from d5pipe.results.mlperf_result import is_mllog

    if not paths:
        raise D5PipeError("history import: name at least one run directory or bundle")
    for p in paths:
        if is_mllog(p):  # a published MLPerf result: its logs
            run_id, new = add_mllog(path, p)
            print(f"{p}: MLPerf result {run_id} {'added' if new else 'already in the history'} ({path})")
            continue
        with opened_bundle(p) as run_dir:
            problems = verify(run_dir) if is_archive(p) else []
            if problems:
                raise D5PipeError(f"{p}: the bundle fails its checksums ({problems[0]}); not imported")
            run_id, new = add_run_dir(path, run_dir)
        print(f"{p}: run {run_id} {'added' if new else 'already in the history'} ({path})")
    return 0


def append_finished_run(run_dir: Path, history: Path | None) -> None:
    """After ``d5pipe run``: add the run to the history, unless ``D5PIPE_HISTORY=off`` (a failure
    to write it is a warning)."""
    from d5pipe.history import store

    if store.disabled_by_env():
        return
    try:
        path = store.resolve(history)
        run_id, _ = store.add_run_dir(path, run_dir)
    except Exception as err:  # noqa: BLE001 -- the run is done and kept; its verdict must not change
        print(f"d5pipe: warning: the run was not added to the history ({type(err).__name__}: {err}); "
              f"d5pipe history import {run_dir} adds it later", flush=True)
        return
    print(f"history: run {run_id} in {path}", flush=True)


