"""d5pipe.results.plausibility: hard findings fail their point, soft ones only warn, once per cause."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe.results.plausibility import PREFIX  # noqa: E402
from d5pipe.results.report import build_report  # noqa: E402
from d5pipe.results.run_results import build_results, with_checks, with_derived  # noqa: E402
from d5pipe.results.verdicts import point_verdicts  # noqa: E402
from report_fixtures import publish, superlinear_run  # noqa: E402


def row(point_id: str, metric: str, value: float, *, stage: str = "level3", kind: str = "numerical",
        unit: str = "", ci: tuple[float, float] | None = None, text: str | None = None,
        env: str = "e1", **axes: Any) -> dict[str, Any]:
    lo, hi = ci if ci else (math.nan, math.nan)
    return {"experiment": "x", "stage": stage, "point_id": point_id, "metric": metric, "value": value,
            "text": text, "unit": unit, "kind": kind, "ci_low": lo, "ci_high": hi, "status": "ok",
            "error": None, "seed": 1, "env_hash": env, **axes}


def scaling_frame(t1: float, t2: float, ci_rel: float = 0.02) -> pd.DataFrame:
    """Two level-3 DDP points (1 and 2 ranks), each with a passing check and a time with a CI."""
    rows = []
    for pid, ranks, t in (("r1", 1, t1), ("r2", 2, t2)):
        axes = {"distributed.ranks": ranks, "distributed.backend": "ddp"}
        rows.append(row(pid, "time_per_step_s", t, kind="timing", unit="s",
                        ci=(t * (1 - ci_rel), t * (1 + ci_rel)), **axes))
        rows.append(row(pid, "matches_serial", math.nan, kind="verdict", text="pass", **axes))
    df = pd.DataFrame(rows)
    return df.astype({"distributed.ranks": "Int64"})


def plaus(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["metric"].astype(str).str.startswith(PREFIX)]


def test_superlinear_speedup_fails_the_point() -> None:
    df = with_checks(with_derived(scaling_frame(0.02, 0.02 / 12.8)), {})
    found = plaus(df)
    assert list(zip(found["point_id"], found["metric"], found["text"], found["kind"])) == [
        ("r2", "plausibility:superlinear_speedup", "fail", "verdict")]
    assert found["value"].item() == pytest.approx(12.8)
    assert found["ci_low"].item() > 2 and found["ci_low"].item() < 12.8 < found["ci_high"].item()
    v = point_verdicts(df).set_index("point_id")
    assert v.loc["r2", "verdict"] == "fail" and v.loc["r1", "verdict"] == "pass"
    assert v.loc["r2", "reason"].startswith("check plausibility:superlinear_speedup failed (speedup 12.8")


def test_plausible_or_within_ci_speedups_are_not_flagged() -> None:
    assert plaus(with_checks(with_derived(scaling_frame(0.02, 0.02 / 1.7)), {})).empty
    # 2.05x on 2 ranks, but the CI reaches below 2: not beyond the CI, so no failure
    assert plaus(with_checks(with_derived(scaling_frame(0.02, 0.02 / 2.05, ci_rel=0.05)), {})).empty


def test_soft_warnings_never_change_a_verdict_and_appear_once_per_point() -> None:
    df = pd.DataFrame([
        row("a", "time", 1e-3, stage="level0", kind="timing", unit="s", ci=(9e-4, 1.1e-3)),
        row("a", "iqr", 2e-4, stage="level0", kind="info", unit="s"),        # 20% of the median
        row("a", "target_met", 0.0, stage="level0", kind="info", text="false"),
        row("a", "correctness", math.nan, stage="level0", kind="verdict", text="pass"),
        row("b", "time", 1e-3, stage="level0", kind="timing", unit="s", env="e2"),
        row("b", "iqr", 5e-5, stage="level0", kind="info", unit="s", env="e2"),  # 5%: fine
        row("c", "time_per_step_s", 0.01, kind="timing", unit="s"),
        row("c", "step_iqr", 0.004, kind="info", unit="s"),
        row("c", "oversubscribed", 1.0, kind="info", text="true"),
        row("c", "shared_host", 1.0, kind="info", text="true"),
    ])
    out = with_checks(df, {})
    found = plaus(out)
    got = sorted(zip(found["stage"], found["point_id"], found["metric"]))
    assert got == [
        ("level0", "a", "plausibility:high_variation"),
        ("level0", "a", "plausibility:several_environments"),
        ("level0", "a", "plausibility:target_missed"),
        ("level0", "b", "plausibility:several_environments"),
        ("level3", "c", "plausibility:high_variation"),
        ("level3", "c", "plausibility:oversubscribed"),
        ("level3", "c", "plausibility:shared_host"),
    ]
    assert set(found["text"]) == {"warn"} and set(found["kind"]) == {"info"}
    hv = found[(found["point_id"] == "a") & (found["metric"] == "plausibility:high_variation")]
    assert hv["value"].item() == pytest.approx(0.2) and "time: IQR is 20.0% of the median" in hv["error"].item()
    c_hv = found[(found["point_id"] == "c") & (found["metric"] == "plausibility:high_variation")]
    assert "time_per_step_s: IQR is 40.0% of the median" in c_hv["error"].item()
    v = point_verdicts(out).set_index("point_id")["verdict"].to_dict()
    assert v == {"a": "pass", "b": "unchecked", "c": "unchecked"}
    again = with_checks(out, {})  # re-evaluated, never accumulated
    assert len(plaus(again)) == len(found) and not again.duplicated(["stage", "point_id", "metric"]).any()


def test_constructed_superlinear_run_fails_in_frame_and_report(tmp_path: Path) -> None:
    pid = superlinear_run(tmp_path, speedup=12.8)
    publish(tmp_path)
    df = build_results(tmp_path).frame  # the one pass: checks and verdicts
    hit = df[(df["point_id"] == pid) & (df["metric"] == "plausibility:superlinear_speedup")]
    assert hit["text"].item() == "fail" and hit["value"].item() == pytest.approx(12.8, rel=1e-6)
    assert set(df.loc[df["point_id"] == pid, "verdict"]) == {"fail"}
    html = build_report(tmp_path)[0].read_text(encoding="utf-8")
    ids = re.findall(r'<section id="([^"]+)"', html)
    assert ids[0] == "failures" and "warnings-superlinear_speedup" in ids
    failures = html[html.index('id="failures"'):html.index('id="overview"')]
    assert pid in failures and "check plausibility:superlinear_speedup failed (speedup 12.8" in failures
    level3 = html[html.index('id="level3"'):html.index('id="warnings"')]
    speedup_fig = level3.index('alt="speedup vs distributed.ranks"')
    note = level3.index("Superlinear speedup on 1 point(s)")
    assert speedup_fig < note < level3.index('alt="efficiency vs distributed.ranks"')
    assert "a hard failure, the point fails" in level3[note:]


def test_a_percentage_of_peak_above_100_beyond_its_ci_is_a_named_warning(tmp_path: Path) -> None:
    """A point faster than its (stubbed) peak carries the warning in the results and the report;
    one whose rate CI reaches below the peak does not."""
    df = pd.DataFrame([
        row("fast", "gflops", 33.3, stage="level0", unit="GFLOP/s", ci=(30.0, 36.0)),
        row("fast", "pct_peak_flops", 3328.0, stage="level0", kind="info", unit="%"),
        row("edge", "gflops", 1.03, stage="level0", unit="GFLOP/s", ci=(0.95, 1.1)),
        row("edge", "pct_peak_flops", 103.0, stage="level0", kind="info", unit="%"),
        row("ok", "gflops", 0.5, stage="level0", unit="GFLOP/s", ci=(0.45, 0.55)),
        row("ok", "pct_peak_flops", 50.0, stage="level0", kind="info", unit="%"),
        row("inf", "gflops_inference", 9.0, stage="level1", unit="GFLOP/s", ci=(8.5, 9.5)),
        row("inf", "pct_peak_flops_inference", 180.0, stage="level1", kind="info", unit="%"),
    ])
    found = plaus(with_checks(df, {}))
    assert sorted(zip(found["point_id"], found["metric"], found["text"])) == [
        ("fast", "plausibility:above_bound", "warn"), ("inf", "plausibility:above_bound", "warn")]
    fast = found.set_index("point_id").loc["fast"]
    assert fast["ci_low"] == pytest.approx(3328.0 * 30.0 / 33.3)
    assert "pct_peak_flops = 3328%" in fast["error"] and "not an upper bound" in fast["error"]
    v = point_verdicts(with_checks(df, {})).set_index("point_id")
    assert v.loc["fast", "verdict"] == v.loc["ok", "verdict"]  # a warning, never a verdict change


def test_nodes_that_are_one_machine_are_named_so() -> None:
    """The SLURM sandbox's nodes are namespaces of one host: same boot ID, CPU sets that overlap."""
    from d5pipe.levels.level3.point import shared_host

    def rank(host: str, boot: str, cpus: list[int]) -> dict[str, Any]:
        return {"hostname": host, "boot_id": boot, "cpus": cpus}

    sandbox = [rank("node1", "b1", [0, 1]), rank("node2", "b1", [0, 1])]
    assert shared_host(sandbox) == "the 2 nodes report one kernel boot ID and their ranks' CPU sets overlap: " \
                                   "they share one host"
    assert shared_host([rank("node1", "b1", [0]), rank("node2", "b1", [1])]).endswith("boot ID: they share one host")
    assert shared_host([rank("node1", "b1", [0]), rank("node2", "b2", [0])]) == ""  # two machines
    assert shared_host([rank("node1", "b1", [0]), rank("node1", "b1", [1])]) == ""  # one node: nothing to say
