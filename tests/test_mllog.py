"""Issue 54, items 2 and 3: MLPerf-format training logs, checked by MLPerf's compliance checker.

The shipped level-2 experiment (narrowed) writes a log per point that passes MLPerf's 6.1.0 common
and open rules (less ``submission_benchmark``) and d5pipe's own, and MLPerf's own command-line
checker accepts it with the ruleset the run keeps; a log missing ``run_stop``, or with two
``run_start``, or another seed than the config's, fails the point's check naming the rule.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from d5pipe.levels.contract import PointContext
from d5pipe.levels.training_log import checked, facts, point_log
from d5pipe.measure.mllog_check import RULESET
from d5pipe.provenance.bundle import bundle_files
from tests.conftest import d5pipe


class _Train:
    optimizer, lr, weight_decay, micro_batches = "sgd", 0.1, 0.0, 1


def _ctx(tmp_path: Path, log: bool = True) -> PointContext:
    work = tmp_path / "work" / "level2" / "p1"
    work.mkdir(parents=True)
    return PointContext(experiment="toy", stage="level2", point_id="p1", params={}, config={}, seed=1,
                        run_dir=tmp_path, work_dir=work, data_dir=tmp_path, executor={},
                        mlperf={"log": log, "org": "acme", "platform": "a laptop"},
                        mlperf_dir=tmp_path / "mlperf" / "level2")


def _write(ctx: PointContext, seed: int = 7, epochs: int = 2, stop: bool = True, target: float | None = 0.9) -> None:
    log = point_log(ctx)
    log.start(facts(ctx.experiment, seed, _Train(), 32, 100, 20))
    log.begin_run()
    for epoch in range(1, epochs + 1):
        log.epoch_start(epoch)
        log.epoch_stop(epoch)
        log.evaluation(0.5 + epoch / 10, epoch_num=epoch)
    if stop:
        log.stop(target, False)
    log.close()


def _check(ctx: PointContext, seed: int = 7) -> tuple[str, str | None, dict]:
    (metric,), extra = checked(ctx, point_log(ctx, append=True), seed, 32)
    return str(metric.value), metric.detail, extra["mllog"]


def test_a_log_written_as_a_point_writes_it_passes_and_is_kept_in_the_run(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _write(ctx)
    verdict, detail, record = _check(ctx)
    assert (verdict, detail) == ("pass", None), record["messages"]
    kept = tmp_path / record["log"]
    assert kept == tmp_path / "mlperf" / "level2" / "p1.log"
    lines = kept.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    keys = [line.split('"key": "')[1].split('"')[0] for line in lines]
    assert keys.count("run_start") == keys.count("run_stop") == 1 and keys.count("eval_accuracy") == 2
    assert '"status": "aborted"' in lines[-1]  # a target of 0.9 never reached
    assert (tmp_path / "mlperf" / f"mlperf_training_{RULESET}_open.yaml").is_file()
    assert set(record["not_applicable"]) == {"submission_benchmark"}


@pytest.mark.parametrize("broken, rule", [
    ("no_run_stop", "run_stop"),
    ("two_run_starts", "run_start"),
    ("other_seed", "seed"),
])
def test_a_broken_log_fails_the_points_check_naming_the_rule(tmp_path: Path, broken: str, rule: str) -> None:
    ctx = _ctx(tmp_path)
    _write(ctx, stop=broken != "no_run_stop")
    path = Path(ctx.work_dir) / "mllog.log"
    if broken == "two_run_starts":
        lines = path.read_text().splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if '"key": "run_start"' in line)
        path.write_text("".join([*lines[: at + 1], lines[at], *lines[at + 1:]]))
    verdict, detail, _ = _check(ctx, seed=8 if broken == "other_seed" else 7)
    assert verdict == "fail" and detail is not None and f"'{rule}'" in detail, detail


def test_no_log_when_the_run_asks_none(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, log=False)
    _write(ctx)
    assert checked(ctx, point_log(ctx, append=True), 7, 32) == ([], {})
    assert not (tmp_path / "mlperf").exists() and not (Path(ctx.work_dir) / "mllog.log").exists()


@pytest.mark.slow
def test_the_shipped_training_experiments_logs_pass_mlperfs_checker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = d5pipe("run", "train_digits", "repetitions=1", "sweep.grid.model.name=[mlp]", "train.epochs=2",
               "train.target_accuracy=null", "mlperf.org=acme", "--out", str(out), "--no-history")
    # 2 epochs may miss the recipe's accuracy; without a target every run's status is success
    assert r.returncode in (0, 3), r.stdout[-2000:] + r.stderr[-2000:]
    df = pd.read_parquet(out / "results.parquet")
    checks = df[df.metric == "mllog_check"]
    assert len(checks) == 4 and set(checks.text) == {"pass"}, checks.error.tolist()
    logs = sorted((out / "mlperf" / "level2").glob("*.log"))
    assert [p.stem for p in logs] == sorted(checks.point_id)
    assert '"key": "submission_org", "value": "acme"' in logs[0].read_text()
    # MLPerf's own command-line checker, with the ruleset the run keeps beside the logs
    rules = out / "mlperf" / f"mlperf_training_{RULESET}_open.yaml"
    ok = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--config", str(rules),
                         str(logs[0])], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert ok.returncode == 0 and "SUCCESS" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    assert "MLPerf logs | 4 training log(s) in mlperf/: 4 pass, 0 fail" in (out / "report.md").read_text()
    # the logs and the ruleset are part of the bundle
    assert {f"mlperf/level2/{p.name}" for p in logs} | {f"mlperf/{rules.name}"} <= set(bundle_files(out))
    # a published MLPerf result (here: these logs, as one result of four runs) in the history, beside the run
    store = tmp_path / "history.duckdb"
    for source in (out / "mlperf" / "level2", out):
        imported = d5pipe("history", "import", str(source), "--history", str(store))
        assert imported.returncode == 0, imported.stderr
    runs = d5pipe("history", "runs", "--history", str(store))
    assert runs.returncode == 0 and "mlperf:train_digits" in runs.stdout and " train_digits " in runs.stdout, runs.stdout
    series = d5pipe("history", "series", "--history", str(store), "--experiment", "mlperf:train_digits",
                    "--metric", "time_to_train_s")
    assert series.returncode == 0 and series.stdout.count("time_to_train_s") >= 1, series.stdout + series.stderr
    # and in a compare against the d5pipe run: each configuration's time to train beside the result's
    compared = d5pipe("compare", str(out / "mlperf" / "level2"), str(out))
    assert compared.returncode == 0, compared.stderr
    assert "MLPerf results side by side" in compared.stdout
    assert compared.stdout.count("time to train, B level2 ") == 4, compared.stdout
    assert "olympic mean of 4 runs" in compared.stdout  # the published side: MLPerf's mean of its runs
    # a log without run_stop is refused in one line
    broken = tmp_path / "broken.log"
    broken.write_text("".join(ln for ln in logs[0].read_text().splitlines(keepends=True) if "run_stop" not in ln))
    refused = d5pipe("history", "import", str(broken), "--history", str(store))
    assert refused.returncode == 2 and "without run_stop" in refused.stderr and len(refused.stderr.splitlines()) == 1


def _result(directory: Path, source: Path, stretch: float, runs: int) -> Path:
    """``runs`` copies of the log ``source`` on a timeline of their own, a second between events
    stretched ``stretch``-fold (each copy a few percent apart): a published result of ``runs`` runs,
    slower or faster by that (the source's own times may all fall in one millisecond)."""
    import json

    directory.mkdir()
    lines = [ln for ln in source.read_text().splitlines() if ln.startswith(":::MLLOG ")]
    events = [json.loads(ln[len(":::MLLOG "):]) for ln in lines]
    t0 = events[0]["time_ms"]
    for k in range(runs):
        factor = stretch * (1 + 0.02 * k)
        out = [":::MLLOG " + json.dumps({**e, "time_ms": int(t0 + i * 1000 * factor)}) for i, e in enumerate(events)]
        (directory / f"result_{k}.txt").write_text("\n".join(out) + "\n")
    return directory


def test_compare_of_two_mlperf_results_gates_on_a_slower_time_to_train(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _write(ctx, target=None)  # no target: the run's status is success, a time MLPerf scores
    checked(ctx, point_log(ctx, append=True), 7, 32)
    log = tmp_path / "mlperf" / "level2" / "p1.log"
    fast, slow = _result(tmp_path / "fast", log, 1.0, 4), _result(tmp_path / "slow", log, 2.0, 4)
    report = tmp_path / "compare.json"
    r = d5pipe("compare", str(fast), str(slow), "--fail-on-regression", "20", "--json", str(report))
    assert r.returncode == 4, r.stdout + r.stderr  # B takes twice as long to train
    assert "olympic mean of 4 runs" in r.stdout and "changed (slower)" in r.stdout
    assert r.stderr.startswith("regression: time to train") and len(r.stderr.strip().splitlines()) == 1
    (row,) = __import__("json").loads(report.read_text())["mlperf"]
    assert row["verdict"] == "changed" and row["ratio"] == pytest.approx(2.0, rel=0.05)
    same = d5pipe("compare", str(fast), str(fast), "--fail-on-regression", "20")
    assert same.returncode == 0 and "changed" not in same.stdout, same.stdout
