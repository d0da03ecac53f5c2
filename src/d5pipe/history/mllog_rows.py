"""What a published MLPerf result (its MLPerf-format logs, one per run) contributes to the history:
one run row, and per log (a repetition) its ``time_to_train_s``, ``eval_accuracy`` and
``samples_per_s`` (d5pipe.results.mlperf_result) under the stage ``mlperf`` and the experiment
``mlperf:<submission_benchmark>``, one series per (benchmark, org, platform, division).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.canonical import canonical_json, digest
from d5pipe.history.run_rows import RESULT_COLUMNS, series_key
from d5pipe.results.mlperf_result import MlperfRun, logs_summary

if TYPE_CHECKING:
    import pandas as pd

STAGE = "mlperf"


def _metrics(run: MlperfRun) -> list[tuple[str, str, str, float | None]]:
    return [("time_to_train_s", "s", "timing", run.time_to_train_s),
            ("eval_accuracy", "", "numerical", run.accuracy),
            ("samples_per_s", "samples/s", "timing", run.samples_per_s)]


def mllog_rows(path: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The result's run row and its result rows (``path``: a log, or a directory of one result's logs)."""
    import pandas as pd

    summary = logs_summary(path)
    runs, first = summary.runs, summary.runs[0]
    run_id = digest([r.sha256 for r in runs], 16)
    experiment = f"mlperf:{first.benchmark}"
    params = {"benchmark": first.benchmark, "org": first.org, "platform": first.platform, "division": first.division}
    series = series_key(experiment, STAGE, params, None)
    created = datetime.fromtimestamp(min(r.started_ms for r in runs) / 1000.0, tz=UTC).isoformat()
    run = {"run_id": run_id, "experiment": experiment, "created": created, "run_dir": str(Path(path).resolve()),
           "hostname": "", "machine": digest(first.platform, 12), "env_hash": "",
           "d5pipe_version": "", "git_commit": "", "packages": "{}", "user_code": "{}",
           "config": json.dumps({"mlperf": {**params, "logs": [Path(r.path).name for r in runs]}}, sort_keys=True),
           "slurm_jobs": "", "slurm_nodes": "", "slurm_cluster": ""}
    rows = [{"run_id": run_id, "experiment": experiment, "stage": STAGE, "series": series,
             "params": canonical_json(params), "point_id": Path(r.path).name, "repeat": i, "metric": name,
             "unit": unit, "kind": kind, "value": float(value), "ci_low": None, "ci_high": None,
             "status": "ok" if r.status == "success" else "failed", "record": Path(r.path).name}
            for i, r in enumerate(runs) for name, unit, kind, value in _metrics(r) if value is not None]
    return run, pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
