"""build_report(): sections per level present, failures first, escaping, no external URLs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe import D5PipeError  # noqa: E402
from d5pipe.results.aggregate import aggregate  # noqa: E402
from d5pipe.results.report import build_report  # noqa: E402
from report_fixtures import RunSpec, make_run_dir  # noqa: E402

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)|https?://""", re.IGNORECASE)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    run_dir = tmp_path_factory.mktemp("report_full")
    make_run_dir(run_dir, RunSpec(failed=2, skipped=1))
    aggregate(run_dir)
    html_path, md_path = build_report(run_dir)
    assert (html_path, md_path) == (run_dir / "report.html", run_dir / "report.md")
    return html_path.read_text(encoding="utf-8"), md_path.read_text(encoding="utf-8")


def section_ids(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', html)


def test_sections_for_every_level_and_failures_first(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    ids = section_ids(html)
    assert ids[0] == "failures"
    for sid in ("overview", "level0", "level1", "level2", "level3", "warnings", "provenance",
                "table-level0", "table-level3"):
        assert sid in ids
    assert ids.index("level0") < ids.index("level3") < ids.index("provenance")


def test_level_content(full_report: tuple[str, str]) -> None:
    html, md = full_report
    assert html.count("data:image/png;base64,") >= 10
    for text in ("Roofline", "Correctness vs the float64 reference", "throughput vs level1.batch_size",
                 "Loss and accuracy per epoch", "Time to target accuracy", "Acceptance thresholds",
                 "speedup vs distributed.ranks", "efficiency vs distributed.ranks", "Dashed: ideal",
                 "busbw_GBps vs distributed.message_bytes", "Speedup base case"):
        assert text in html, text
    # failing correctness rows come first in their table, highlighted
    table = html[html.index("Correctness vs the float64 reference"):]
    table = table[: table.index("</table>")]
    first_row = table[table.index("<tbody>"):].split("</tr>")[0]
    assert 'class="bad"' in first_row and ">fail<" in first_row
    for text in ("## Failures", "## L0 operators", "## Provenance", "| stage | point_id | status |"):
        assert text in md


def test_warnings_and_provenance(full_report: tuple[str, str]) -> None:
    html, md = full_report
    for text in ("ranks exceed cores", "loss curve is noisy", "missed CI target", "oversubscription",
                 "Reproduction verdict: not reproduced", "Per-point seeds", "e3b0c44298fc1c14",
                 "Composed config (config.yaml)", "Environment record", "2.13.0"):
        assert text in html, text
    assert "Reproduction verdict: not reproduced" in md


def test_hostile_text_is_escaped(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    assert "<script" not in html.lower()
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert html.count("&lt;script&gt;") >= 4  # error text, param value, description, environment


def test_no_external_urls(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    assert not EXTERNAL.search(html)
    for ref in re.findall(r"""(?:src|href)\s*=\s*"([^"]*)\"""", html):
        assert ref.startswith(("#", "data:image/png;base64,")), ref


def test_only_present_levels_and_no_failures_section(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level3",), failed=0, hostile=False, reproduce=False))
    aggregate(tmp_path)
    html = build_report(tmp_path)[0].read_text(encoding="utf-8")
    ids = section_ids(html)
    assert ids[0] == "overview" and "failures" not in ids
    assert "level3" in ids and not {"level0", "level1", "level2"} & set(ids)
    assert "Reproduction verdict" not in html


def test_tolerates_missing_metrics_manifest_and_side_tables(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level0", "level2"), failed=0, hostile=False))
    aggregate(tmp_path)
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    (tmp_path / "curves.parquet").unlink()  # report falls back to the point records
    html = build_report(tmp_path)[0].read_text(encoding="utf-8")
    assert "Loss and accuracy per epoch" in html
    assert "d5pipe version" in html and "unknown" in html


def test_missing_results_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="results.parquet"):
        build_report(tmp_path)
