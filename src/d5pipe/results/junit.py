"""JUnit XML of a run: a test suite per stage, a test case per point, its checks as properties.

CI systems (GitLab, Jenkins, GitHub test reporters) show a failed point -- crashed, never run,
or a failing check -- as a failed test with its reason; a skipped point as skipped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from d5pipe.core.atomic import write_bytes
from d5pipe.results.verdicts import check_rows

if TYPE_CHECKING:
    import pandas as pd


def junit_xml(results: pd.DataFrame, pv: pd.DataFrame, name: str = "d5pipe") -> bytes:
    """``pv``: the points' verdicts of ``results`` (d5pipe.results.verdicts.point_verdicts)."""
    chk = check_rows(results)
    root = ET.Element("testsuites", name=name, tests=str(len(pv)),
                      failures=str(int((pv["verdict"] == "fail").sum())))
    for stage, group in pv.groupby("stage", sort=True):
        suite = ET.SubElement(root, "testsuite", name=str(stage), tests=str(len(group)),
                              failures=str(int((group["verdict"] == "fail").sum())),
                              skipped=str(int((group["status"] == "skipped").sum())))
        for r in group.itertuples(index=False):
            case = ET.SubElement(suite, "testcase", classname=f"d5pipe.{stage}", name=str(r.point_id))
            mine = chk[(chk["stage"] == stage) & (chk["point_id"] == r.point_id)]
            if len(mine):
                props = ET.SubElement(case, "properties")
                for c in mine.itertuples(index=False):
                    ET.SubElement(props, "property", name=str(c.metric), value=str(c.text))
            if r.verdict == "fail":
                ET.SubElement(case, "failure", message=str(r.reason)).text = str(r.reason)
            elif r.status == "skipped":
                ET.SubElement(case, "skipped", message=str(r.reason))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(results: pd.DataFrame, pv: pd.DataFrame, path: Path) -> Path:
    write_bytes(Path(path), junit_xml(results, pv))
    return Path(path)
