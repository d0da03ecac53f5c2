"""Verdicts nobody can misread: a wrong operator, a failed acceptance threshold and a crashed
point each come out ``fail``, first in the report, in the exit code and in ``d5pipe status``;
changing the recipe re-evaluates verdicts without re-measuring anything."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import TEST_CONF, TESTING_OPS_ENV, d5pipe

pytestmark = pytest.mark.slow
CONF = ["--config-dir", str(TEST_CONF)]


@pytest.fixture(scope="module")
def verdict_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    run = tmp_path_factory.mktemp("verdicts") / "run"
    return run, d5pipe("run", "verdicts", *CONF, "--out", str(run), "--junit", str(run.parent / "junit.xml"),
                       env=TESTING_OPS_ENV)


def _failing(run: Path) -> dict[str, str]:
    df = pd.read_parquet(run / "results.parquet")
    pts = df.drop_duplicates(["stage", "point_id"])
    return {str(r.point_id): str(r.verdict) for r in pts.itertuples()}


def test_run_and_status_exit_non_zero_with_one_summary_line(verdict_run) -> None:
    run, r = verdict_run
    assert r.returncode == 3, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last == f"d5pipe: 3 of 4 points did not pass (1 failed, 2 failed checks); see {run / 'report.html'}#failures"
    status = d5pipe("status", str(run))
    assert status.returncode == 3
    assert status.stdout.strip().splitlines()[-1] == last


def test_results_carry_the_verdict_of_every_point(verdict_run) -> None:
    run, _ = verdict_run
    verdicts = _failing(run)
    assert sorted(verdicts.values()) == ["fail", "fail", "fail", "pass"]
    assert next(v for pid, v in verdicts.items() if pid.startswith("matmul-")) == "pass"


def test_the_report_lists_exactly_the_three_failures_first(verdict_run) -> None:
    run, _ = verdict_run
    html = (run / "report.html").read_text()
    failures = html[html.index('id="failures"'):html.index("</section>", html.index('id="failures"'))]
    assert html.index('id="failures"') < html.index('id="overview"') < html.index('id="level0"')
    for pid, verdict in _failing(run).items():
        assert (pid in failures) == (verdict == "fail"), pid
    assert "crashed: exit 137" in failures
    assert "check correctness failed" in failures
    assert "check acceptance:test_accuracy failed" in failures and "required &gt;= 0.999" in failures
    overview = html[html.index('id="overview"'):html.index('id="level0"')]
    assert "point(s) pass" not in overview and 'class="good"' not in overview


def test_junit_xml_shows_the_failures(verdict_run) -> None:
    run, _ = verdict_run
    root = ET.parse(run.parent / "junit.xml").getroot()
    assert root.get("tests") == "4" and root.get("failures") == "3"
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert failed == {pid for pid, v in _failing(run).items() if v == "fail"}


def test_verdicts_follow_the_recipe_without_re_measuring(verdict_run, tmp_path: Path) -> None:
    run, _ = verdict_run
    stamps = {p: p.stat().st_mtime_ns for p in (run / "points").glob("*/*.json")}
    loose = d5pipe("run", "verdicts", *CONF, "--out", str(run), "recipe.acceptance=[{metric: test_accuracy, op: '>=', value: 0.1, stage: level2}]",
                   env=TESTING_OPS_ENV)
    assert loose.returncode == 3 and "2 of 4 points did not pass" in loose.stdout, loose.stdout + loose.stderr
    level2 = next(pid for pid in _failing(run) if not pid.startswith(("matmul", "fault")))
    assert _failing(run)[level2] == "pass"
    again = d5pipe("run", "verdicts", *CONF, "--out", str(run), env=TESTING_OPS_ENV)
    assert again.returncode == 3 and "3 of 4 points did not pass" in again.stdout
    assert _failing(run)[level2] == "fail"
    assert {p: p.stat().st_mtime_ns for p in (run / "points").glob("*/*.json")} == stamps, "re-measured"
    rebuilt = d5pipe("report", str(run))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads((run / "verdict.json").read_text())["failed_checks"] == 2



def test_one_junit_writer_for_a_runs_points_and_the_historys_series() -> None:
    """d5pipe.results.junit.junit_document writes both: a run's suites count their cases (a point
    never run is a failure and, by its status, skipped), ``history check``'s do not."""
    from d5pipe.results.junit import Case, junit_document

    suites = {"level0": [Case("d5pipe.level0", "a", failure="not run", skipped="not run", properties=(("ok", "fail"),)),
                         Case("d5pipe.level0", "b", skipped="skipped: no GPU")],
              "level1": [Case("d5pipe.level1", "c")]}
    root = ET.fromstring(junit_document("d5pipe", suites))
    assert (root.get("name"), root.get("tests"), root.get("failures")) == ("d5pipe", "3", "1")
    level0 = root.find("testsuite[@name='level0']")
    assert level0 is not None and [level0.get(k) for k in ("tests", "failures", "skipped")] == ["2", "1", "2"]
    a = level0.find("testcase[@name='a']")
    assert a is not None and a.get("classname") == "d5pipe.level0" and a.find("skipped") is None
    assert a.findtext("failure") == "not run" and a.find("properties/property").attrib == {"name": "ok", "value": "fail"}
    bare = ET.fromstring(junit_document("d5pipe history", suites, suite_counts=False))
    assert [s.keys() for s in bare.iter("testsuite")] == [["name"], ["name"]] and bare.get("failures") == "1"
