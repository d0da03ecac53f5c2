"""``d5pipe compare A B``: configurations side by side, three verdicts, the gates."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from d5pipe.cli import cmd_compare
from d5pipe.core.outcome import Metric
from d5pipe.provenance import bundle
from d5pipe.results.compare import compare_runs, load_points, regressions
from d5pipe.results.compare_table import format_table
from d5pipe.rundir.layout import RunDir
from d5pipe.rundir.record import write_record
from tests.report_fixtures import publish


def make_run(root: Path, name: str, slowdown: float, sizes: tuple[int, ...], seed: int, reps: int = 5,
             params: dict[str, object] | None = None) -> Path:
    """A run dir with real records and a real aggregated results.parquet (synthetic timing samples):
    each size measured in ``reps`` repetitions (axis ``repeat``), each repetition's level drawn
    around the size's time (between-process noise 5%), its samples that level plus a shared
    machine's noise, which only adds time (exponential, 10% on average)."""
    run = root / name
    rng = np.random.default_rng(seed)
    for size in sizes:
        for rep in range(reps):
            pid = f"mm-{size}" + (f"-r{rep}" if rep else "")
            level = slowdown * 1e-4 * size * float(rng.lognormal(0.0, 0.05))
            times = (level * (1.0 + rng.exponential(0.1, size=40))).tolist()
            metrics = [  # like level0: the rate metric points at the time samples
                Metric("time", float(np.median(times)), "s", "timing", samples="time"),
                Metric("gflops", 2.0 * size**3 / float(np.median(times)) / 1e9, "GFLOP/s", "timing", samples="time"),
                Metric("checksum", f"c{size}", "", "deterministic"),
            ]
            point_params = {"operators.size": size, **(params or {}), **({"repeat": rep} if reps > 1 else {})}
            write_record(RunDir.of(run).record("level0", pid), {
                "experiment": "demo", "stage": "level0", "point_id": pid, "params": point_params,
                "seed": size * 100 + rep, "status": "ok", "error": None, "metrics": [m.to_dict() for m in metrics],
                "samples": {"time": times}, "extra": {}, "env_hash": "x", "provenance": {},
            })
    write_record(RunDir.of(run).record("level0", "mm-broken"), {
        "experiment": "demo", "stage": "level0", "point_id": "mm-broken",
        "params": {"operators.size": 1, **(params or {}), **({"repeat": 0} if reps > 1 else {})},
        "seed": 1, "status": "failed", "error": "RuntimeError: boom", "metrics": [], "samples": {},
    })
    publish(run)
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "experiment": "demo"}))
    (run / "plan").mkdir(exist_ok=True)
    axes = ["operators.size", *(params or {}), *(["repeat"] if reps > 1 else [])]
    (run / "plan" / "index.json").write_text(json.dumps({
        "schema_version": 1, "experiment": "demo", "config_hash": "x", "datasets": {},
        "stages": {"level0": {"shards": [], "points": len(sizes) * reps + 1, "axes": axes}}}))
    bundle.write_checksums(run)
    return run


def test_load_points_reads_params_and_values_from_the_results(tmp_path: Path) -> None:
    run = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    points = load_points(run)
    p = points[("level0", "mm-8")]
    assert p.params == {"operators.size": 8, "repeat": 0} and p.status == "ok" and p.repetition == 0
    time = p.metrics["time"]
    assert time.kind == "timing" and time.unit == "s" and isinstance(time.value, float)
    samples = json.loads(RunDir.of(run).record("level0", "mm-8").read_text())["samples"]["time"]
    assert p.fastest == {"time": min(samples)}  # gflops is no median of its samples: compared by its value
    assert load_points(run, fastest=False)[("level0", "mm-8")].fastest == {}
    broken = points[("level0", "mm-broken")]
    assert broken.status == "failed" and broken.metrics == {} and "boom" in (broken.error or "")


def test_slowdown_is_changed_and_a_regression(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16, 32), seed=1)
    b = make_run(tmp_path, "b", 1.25, (8, 16, 64), seed=2)
    result = compare_runs(a, b)
    assert [p.point_id for p in result.points] == ["mm-16", "mm-8", "mm-broken"]
    assert result.only_ref[0] == ("level0", "mm-32") and len(result.only_ref) == 5  # every repetition
    assert result.only_new[0] == ("level0", "mm-64") and len(result.only_new) == 5
    found = regressions(result, 10.0)
    assert sorted((p.point_id, t.metric) for p, t in found) == [("mm-16", "time"), ("mm-8", "time")]
    for _, t in found:
        assert t.verdict == "changed" and t.direction == "slower" and t.ci is not None and t.ci[0] > 1
        assert t.p_adjusted is not None and t.p_adjusted < 0.05 and len(t.a.values) == len(t.b.values) == 5
    # GFLOP/s is a constant over the same time: the same test, shown once, never counted twice
    rates = [t for p in result.points for t in p.timings if t.metric == "gflops"]
    assert rates and all(t.derived_from == "time" and t.direction == "slower" for t in rates)
    assert result.counts()["changed"] == 2
    assert regressions(result, 40.0) == []
    table = format_table(result)
    assert "changed (slower)" in table and "(gflops follow time)" in table and "5 points only in A" in table
    assert all(len(line) <= 120 for line in table.splitlines()[:-1])


def test_same_runs_are_equivalent_never_changed(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    result = compare_runs(a, a)
    assert regressions(result, 0.0) == []
    assert {t.verdict for p in result.points for t in p.timings} == {"equivalent"}
    assert all(c.verdict in ("reproduced", "not_compared") for p in result.points for c in p.comparisons)
    table = format_table(result)
    assert "equivalent (within x1.1)" in table and "other metric(s) identical" in table
    assert "[repeat" not in table  # the repetitions are folded, not listed


def test_one_process_per_side_is_never_a_regression(tmp_path: Path) -> None:
    """Without repetitions a timing is "not compared (one process per side)", however far apart."""
    a = make_run(tmp_path, "a", 1.0, (8,), seed=1, reps=1)
    b = make_run(tmp_path, "b", 3.0, (8,), seed=2, reps=1)
    result = compare_runs(a, b)
    assert regressions(result, 0.0) == []
    [time] = [t for p in result.points for t in p.timings if t.metric == "time"]
    assert time.verdict == "not_compared" and "one process per side" in time.reason


def test_points_are_matched_by_parameters_not_ids(tmp_path: Path) -> None:
    """Two configs of one experiment: IDs differ (another fixed value), the sweep parameters match."""
    a = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    b = make_run(tmp_path, "b", 1.5, (8, 16), seed=2)
    for rec in (b / "points" / "level0").glob("*.json"):  # other IDs, same parameters
        data = json.loads(rec.read_text())
        data["point_id"] = "other-" + data["point_id"]
        rec.unlink()
        write_record(RunDir.of(b).record("level0", data["point_id"]), data)
    publish(b, {"level0": sorted(p.stem for p in (b / "points" / "level0").glob("*.json"))})  # no real plan
    bundle.write_checksums(b)
    result = compare_runs(a, b)
    assert len(result.points) == 3 and result.only_ref == [] and result.only_new == []
    assert {(p.point_id, t.metric) for p, t in regressions(result, 10.0)} == {("mm-8", "time"), ("mm-16", "time")}


def test_cli_gates_on_changed_and_on_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path, "a", 1.0, (8, 16), seed=1)
    b = make_run(tmp_path, "b", 1.25, (8, 16), seed=2)
    archive_b = bundle.archive(b, tmp_path / "b.tar.gz")
    parser = argparse.ArgumentParser()
    cmd_compare.add_arguments(parser)
    out_json = tmp_path / "cmp.json"
    args = parser.parse_args([str(a), str(archive_b), "--fail-on-regression", "10", "--json", str(out_json)])
    assert cmd_compare.main(args) == cmd_compare.REGRESSION_EXIT == 4
    out = capsys.readouterr()
    assert "regression: level0/mm-8 time" in out.err
    last = out.out.splitlines()[-1]
    assert last.startswith("compare: 2 timings (measured in separate runs): 2 changed (2 slower, 0 faster)")
    data = json.loads(out_json.read_text())
    assert data["schema_version"] == 2 and data["counts"]["changed"] == 2
    assert cmd_compare.main(parser.parse_args([str(a), str(b), "--fail-on-regression", "40"])) == 0
    assert cmd_compare.main(parser.parse_args([str(b), str(a), "--fail-on-regression", "10"])) == 0  # faster
    capsys.readouterr()
    # a margin too tight for 5 repetitions to show equivalence: undecided, which the flag fails on
    c = make_run(tmp_path, "c", 1.0, (8, 16), seed=3)
    assert cmd_compare.main(parser.parse_args([str(a), str(c), "--margin", "0.5", "--fail-on-inconclusive"])) \
        == cmd_compare.INCONCLUSIVE_EXIT == 5
    assert "inconclusive" in capsys.readouterr().err
    assert cmd_compare.main(parser.parse_args([str(a), str(c), "--margin", "50", "--fail-on-inconclusive"])) == 0


def test_a_timing_not_reached_is_said_so_and_never_a_change() -> None:
    """time_to_target_s is NaN when a training never reached its target: "not reached", per side."""
    from d5pipe.results.timing_compare import compare_one

    nan = float("nan")
    c = compare_one("time_to_target_s", "s", [1.0, 1.1, 0.9], [nan, 2.0, nan])
    assert c.verdict == "inconclusive" and c.direction is None
    assert "not reached in 0 of 3 repetitions of A and 2 of 3 of B" in c.reason
    both = compare_one("time_to_target_s", "s", [nan, nan], [nan, nan])
    assert both.verdict == "equivalent" and "not reached in any repetition" in both.reason


def test_a_timer_timing_is_compared_by_each_process_fastest_sample() -> None:
    """Three of B's five processes shared their core with something else for most of their samples
    (medians 40% up) while their fastest samples stayed where A's are: by the fastest samples the
    same code is equivalent, by the medians it would not be. GFLOP/s moves with its time."""
    from d5pipe.results.compare import PointData, compare_loaded
    from d5pipe.results.metric_compare import ComparePolicy, MetricValue
    from d5pipe.results.repetition_values import fastest_sample

    assert fastest_sample(2.0, [1.0, 2.0, 9.0]) == 1.0  # a timer's median: its fastest sample
    assert fastest_sample(2.0, [1.0, 2.0, 9.0], lower_is_better=False) == 9.0  # a rate's: its highest
    assert fastest_sample(12.0, [1.0, 2.0, 9.0]) is None  # a total over its parts: its own value

    def side(medians: list[float], fastest: list[float]) -> dict[tuple[str, str], PointData]:
        out = {}
        for r, (med, best) in enumerate(zip(medians, fastest)):
            metrics = {"time": MetricValue(med, "s", "timing"), "gflops": MetricValue(2.0 / med, "GFLOP/s", "timing")}
            out[("level0", f"p-r{r}")] = PointData("level0", f"p-r{r}", "ok", None, r, {"operators.size": 8, "repeat": r},
                                                  metrics, {"time": best})
        return out

    a = side([1.00, 1.02, 0.99, 1.01, 1.00], [0.900, 0.905, 0.899, 0.902, 0.901])
    b = side([1.40, 1.45, 1.38, 1.00, 1.02], [0.901, 0.903, 0.900, 0.899, 0.904])
    timings = {t.metric: t for p in compare_loaded(a, b, ComparePolicy()).points for t in p.timings}
    time, gflops = timings["time"], timings["gflops"]
    assert time.verdict == "equivalent" and time.a.fastest and "fastest sample" in time.text()
    assert time.ratio is not None and gflops.ratio is not None and abs(time.ratio * gflops.ratio - 1) < 1e-9
    assert gflops.derived_from == "time" and gflops.verdict == "equivalent"
    for pts in (a, b):  # the same runs without their samples: by the medians, not equivalent
        for p in pts.values():
            p.fastest.clear()
    by_median = {t.metric: t for p in compare_loaded(a, b, ComparePolicy()).points for t in p.timings}["time"]
    assert by_median.verdict != "equivalent" and not by_median.a.fastest


def test_run_noise_is_an_option_of_comparisons_of_separate_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """``--run-noise PCT`` (default measured, 1%): the variance a separate run adds. It widens the CI of
    two runs measured apart; a bad value is argparse's one line, exit 2."""
    from d5pipe.results.timing_compare import DEFAULT_RUN_NOISE, compare_one

    parser = argparse.ArgumentParser()
    cmd_compare.add_policy_arguments(parser)
    assert cmd_compare.timing_policy_from_args(parser.parse_args([])).run_noise == DEFAULT_RUN_NOISE == 0.01
    assert cmd_compare.timing_policy_from_args(parser.parse_args(["--run-noise", "0"])).run_noise == 0.0
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--run-noise", "-1"])
    assert exc.value.code == 2 and "--run-noise" in capsys.readouterr().err
    a = [1.00, 1.001, 0.999, 1.0005, 1.0]
    b = [1.03 * x for x in a]  # ten processes that agree to 0.1%: a 3% shift of a whole run
    quiet = compare_one("time", "s", a, b, cmd_compare.timing_policy_from_args(parser.parse_args(["--run-noise", "0"])))
    assert quiet.verdict == "changed"
    honest = compare_one("time", "s", a, b, cmd_compare.timing_policy_from_args(parser.parse_args(["--run-noise", "3"])))
    assert honest.verdict != "changed" and honest.ci is not None and honest.ci[1] - honest.ci[0] > quiet.ci[1] - quiet.ci[0]  # type: ignore[index]
