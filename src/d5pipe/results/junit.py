"""JUnit XML: the one writer of the format (:func:`junit_document`, from :class:`Case`s), and a run's
document: a test suite per stage, a test case per point, its checks as properties.

CI systems (GitLab, Jenkins, GitHub test reporters) show a failed point -- crashed, never run,
or a failing check -- as a failed test with its reason; a skipped point as skipped. ``d5pipe history
check`` writes its series through the same writer (d5pipe.history.check).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.core.atomic import write_bytes
from d5pipe.results.verdicts import check_rows

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Case:
    """One test case: failed with ``failure`` (its message and text), else skipped with ``skipped``
    (its message), else passed; ``properties``, named values shown with it (a point's checks)."""

    classname: str
    name: str
    failure: str | None = None
    skipped: str | None = None
    properties: tuple[tuple[str, str], ...] = ()


def junit_document(name: str, suites: Mapping[str, Sequence[Case]], suite_counts: bool = True) -> bytes:
    """``testsuites`` called ``name`` with its tests and failures counted, a ``testsuite`` per entry of
    ``suites`` (in their order) holding its cases; ``suite_counts``: each suite counts its own tests,
    failures and skipped (a case with a skip reason counts as skipped even where it failed)."""
    cases = [c for group in suites.values() for c in group]
    root = ET.Element("testsuites", name=name, tests=str(len(cases)),
                      failures=str(sum(c.failure is not None for c in cases)))
    for suite_name, group in suites.items():
        suite = ET.SubElement(root, "testsuite", name=suite_name)
        if suite_counts:
            suite.set("tests", str(len(group)))
            suite.set("failures", str(sum(c.failure is not None for c in group)))
            suite.set("skipped", str(sum(c.skipped is not None for c in group)))
        for c in group:
            case = ET.SubElement(suite, "testcase", classname=c.classname, name=c.name)
            if c.properties:
                props = ET.SubElement(case, "properties")
                for key, value in c.properties:
                    ET.SubElement(props, "property", name=key, value=value)
            if c.failure is not None:
                ET.SubElement(case, "failure", message=c.failure).text = c.failure
            elif c.skipped is not None:
                ET.SubElement(case, "skipped", message=c.skipped)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def junit_xml(results: pd.DataFrame, pv: pd.DataFrame, name: str = "d5pipe") -> bytes:
    """``pv``: the points' verdicts of ``results`` (d5pipe.results.verdicts.point_verdicts)."""
    chk = check_rows(results)
    suites: dict[str, list[Case]] = {}
    for stage, group in pv.groupby("stage", sort=True):
        cases: list[Case] = []
        for r in group.itertuples(index=False):
            mine = chk[(chk["stage"] == stage) & (chk["point_id"] == r.point_id)]
            cases.append(Case(
                f"d5pipe.{stage}", str(r.point_id),
                failure=str(r.reason) if r.verdict == "fail" else None,
                skipped=str(r.reason) if r.status == "skipped" else None,
                properties=tuple((str(c.metric), str(c.text)) for c in mine.itertuples(index=False))))
        suites[str(stage)] = cases
    return junit_document(name, suites)


def write_junit(results: pd.DataFrame, pv: pd.DataFrame, path: Path) -> Path:
    write_bytes(Path(path), junit_xml(results, pv))
    return Path(path)
