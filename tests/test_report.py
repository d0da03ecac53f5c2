"""build_report(): failures first with reasons, verdict-based wording, readable units, natural order,
side-by-side comparisons, warnings once per cause, escaping, no external URLs."""

from __future__ import annotations

import json
import re
import sys
from html import unescape
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe import D5PipeError  # noqa: E402
from d5pipe.levels.registry import LEVELS  # noqa: E402
from d5pipe.results.report import build_report  # noqa: E402
from d5pipe.rundir.record import read_record  # noqa: E402
from report_fixtures import HOSTILE, RunSpec, make_run_dir, publish  # noqa: E402

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)|https?://""", re.IGNORECASE)
FULL = RunSpec(failed=2, skipped=1, grids={"level2": {"train.lr": [0.001, 0.003, 0.01],
                                                      "train.optimizer": ["sgd", "adam"]}})
ALL_PASS = re.compile(r"\bAll\b[^.<|]*\bpass", re.IGNORECASE)
TIME_CELL = re.compile(r"(?:^|\s)(?:s|ms|µs|ns)$")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("report_full")
    make_run_dir(run_dir, FULL)
    publish(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def full_report(full_run: Path) -> tuple[str, str]:
    html_path, md_path = build_report(full_run)
    assert (html_path, md_path) == (full_run / "report.html", full_run / "report.md")
    return html_path.read_text(encoding="utf-8"), md_path.read_text(encoding="utf-8")


def section_ids(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', html)


def section(html: str, sid: str) -> str:
    """The HTML of section ``sid`` up to the next top-level section."""
    start = html.index(f'<section id="{sid}"')
    nxt = [m.start() for m in re.finditer(r'<section id="[^"]+" class="[^"]+"><h2>', html) if m.start() > start]
    return html[start: nxt[0] if nxt else len(html)]


def tables(html: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every table, cells unescaped."""
    out = []
    for t in re.findall(r"<table>(.*?)</table>", html, re.S):
        head = [unescape(c) for c in re.findall(r"<th>(.*?)</th>", t, re.S)]
        rows = [[unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
                for r in re.findall(r"<tr[^>]*>(.*?)</tr>", t.split("<tbody>", 1)[-1], re.S)]
        out.append((head, rows))
    return out


def expected_failures(run_dir: Path) -> dict[str, str]:
    """point_id -> why it fails, straight from the records (independent of the report code)."""
    out = {}
    for path in (run_dir / "points").glob("*/*.json"):
        rec = read_record(path)
        if rec["status"] == "failed":
            out[rec["point_id"]] = "failed: " + rec["error"].splitlines()[0]
        elif any(m["name"] == "correct" and m["value"] == "fail" for m in rec["metrics"]):
            out[rec["point_id"]] = "check correct failed"
    return out


def test_failures_section_first_lists_exactly_the_failing_points(full_run: Path, full_report: tuple[str, str]) -> None:
    html, md = full_report
    ids = section_ids(html)
    assert ids[0] == "failures" and ids[1] == "skipped" and ids[2] == "overview"
    assert ids.index("failures") < ids.index("level0") < ids.index("level3") < ids.index("provenance")
    fail_html = section(html, "failures")
    head, rows = tables(fail_html.split('id="skipped"')[0])[0]
    assert head == ["stage", "point_id", "parameters", "status", "reason"]
    got = {r[1]: r[4] for r in rows}
    assert got == expected_failures(full_run)
    assert len(got) == 5  # 2 crashed + 3 naive-impl points that fail their correctness check
    assert {r[3] for r in rows} == {"failed", "ran; check failed"}
    crashed = [r for r in rows if r[3] == "failed"]
    assert len(crashed) == 2 and all(r[4].startswith("failed: RuntimeError: boom") for r in crashed)
    assert all("operators.size=" in r[2] and "operators.impl=" in r[2] for r in rows)
    # skipped points: a separate, labelled table, not counted as failures
    skipped_head, skipped = tables(fail_html.split('id="skipped"')[1])[0]
    assert skipped_head == ["stage", "point_id", "parameters", "reason"]
    assert [r[3] for r in skipped] == ["skipped: fp16 unsupported on this CPU"]
    assert "Skipped points (not failures)" in fail_html
    md_fail = md[md.index("## Failures"):md.index("## Overview")]
    assert all(pid in md_fail for pid in got) and "### Skipped points (not failures)" in md_fail


def test_overview_counts_verdicts_and_says_pass_only_when_true(full_report: tuple[str, str]) -> None:
    html, md = full_report
    head, rows = tables(section(html, "overview"))[0]
    assert head == ["stage", "points", "pass", "fail", "unchecked", "skipped"]
    counts = {r[0]: r[1:] for r in rows}
    assert counts["level0"] == ["16", "10", "5", "0", "1"]
    assert counts["level2"] == ["6", "6", "0", "0", "0"]  # the recipe's acceptance threshold passes
    assert counts["level3"] == ["12", "0", "0", "12", "0"]  # no check: unchecked, never "pass"
    assert not ALL_PASS.search(html) and not ALL_PASS.search(md)  # something failed
    assert 'class="good"' not in html
    assert "5 of 46 point(s) fail" in section(html, "overview")


def test_pass_wording_when_nothing_failed(tmp_path: Path) -> None:
    make_run_dir(tmp_path / "a", RunSpec(levels=("level2",), failed=0, hostile=False, reproduce=False))
    publish(tmp_path / "a")
    html = build_report(tmp_path / "a")[0].read_text(encoding="utf-8")
    assert "All 3 point(s) pass." in section(html, "overview") and "failures" not in section_ids(html)
    make_run_dir(tmp_path / "b", RunSpec(levels=("level3",), failed=0, hostile=False, reproduce=False))
    publish(tmp_path / "b")
    html = build_report(tmp_path / "b")[0].read_text(encoding="utf-8")
    overview = section(html, "overview")
    assert not ALL_PASS.search(overview) and "No point failed: 0 pass, 12 unchecked" in overview


def test_a_failed_acceptance_threshold_is_a_failure_with_its_reason(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level2",), failed=0, hostile=False, reproduce=False, acceptance=0.995))
    publish(tmp_path)
    html, md = (p.read_text(encoding="utf-8") for p in build_report(tmp_path))
    _, rows = tables(section(html, "failures"))[0]
    assert len(rows) == 3
    for r in rows:
        assert re.fullmatch(r"check acceptance:final_test_accuracy failed \(final_test_accuracy=0\.9\d+, "
                            r"required >= 0\.995\)", r[4]), r[4]
    assert not ALL_PASS.search(html) and not ALL_PASS.search(md)


def test_units_are_prefixed_and_times_never_in_scientific_notation(full_report: tuple[str, str]) -> None:
    html, md = full_report
    cells = [c for _, rows in tables(html) for r in rows for c in r]
    time_cells = [c for c in cells if TIME_CELL.search(c)]
    assert time_cells and not [c for c in time_cells if re.search(r"\de[-+]?\d", c)]
    assert not re.search(r"\d\.\d+e-0\d s\b", html + md)
    for unit in (" µs", " ms", " KiB", " MiB", "GFLOP/s", "MB/s", "k samples/s", "MFLOP"):
        assert any(unit in c for c in cells), unit
    assert "white-space:normal" in html and "overflow-x:auto;max-width" not in html  # cells wrap, tables never scroll
    # the Markdown file shows the same cells
    assert "| 84.86 [84.7, 85.33] µs |" in md and "84.86 [84.7, 85.33] µs" in html


def test_natural_numeric_order_and_integer_axes(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    l0 = re.search(r'<section id="table-level0".*?</table>', html, re.S)
    assert l0 is not None
    head, rows = tables(l0.group(0))[0]
    sizes = [r[head.index("operators.size")] for r in rows if r[head.index("operators.impl")] == "eager"]
    assert sizes == ["64", "128", "256"]  # natural order, integers without ".0" (size 32 crashed)
    l1 = re.search(r'<section id="table-level1".*?</table>', html, re.S)
    assert l1 is not None
    head, rows = tables(l1.group(0))[0]
    batches = list(dict.fromkeys(r[head.index("level1.batch_size")] for r in rows))
    assert batches == ["8", "16", "64"]
    l2 = re.search(r'<section id="table-level2".*?</table>', html, re.S)
    assert l2 is not None
    head, rows = tables(l2.group(0))[0]
    lrs = list(dict.fromkeys(r[head.index("train.lr")] for r in rows))
    assert lrs == ["0.001", "0.003", "0.01"]


def test_side_by_side_comparisons_per_level(full_report: tuple[str, str]) -> None:
    html, md = full_report
    ids = section_ids(html)
    for stage in ("level0", "level1", "level2", "level3"):
        assert f"compare-{stage}" in ids, stage
    cmp0 = html[html.index('id="compare-level0"'):html.index('id="table-level0"')]
    head, rows = tables(cmp0)[0]
    assert head[:3] == ["metric", "other axes", "variant"] and "speedup [95% CI]" in head
    by_variant = {(r[1], r[2].split(" vs ")[0]): r for r in rows}
    compiled = by_variant[("operators.size=128", "compiled")]
    # one process per side (this run has no repetitions): the speedup is shown, never ranked
    assert compiled[-1].startswith("not compared: one process per side")
    naive = by_variant[("operators.size=128", "naive")]
    # naive fails its correctness check: listed with that failure, never ranked (synthetic: 5x slower)
    assert naive[-1].startswith("not compared: variant failed: check correct failed") and naive[5] == ""
    assert [r[1] for r in rows if r[2].startswith("compiled")] == [
        "operators.size=64", "operators.size=128", "operators.size=256"]  # size 32 eager crashed: no pair
    assert "speedup vs eager" not in cmp0  # nothing ranked: no speedup figure
    cmp2 = html[html.index('id="compare-level2"'):html.index('id="table-level2"')]
    assert "baseline train.optimizer=sgd" in cmp2 and "adam vs sgd" in cmp2
    cmp3 = html[html.index('id="compare-level3"'):html.index('id="table-level3"')]
    assert "mpi vs ddp" in cmp3 and "distributed.ranks=2" in cmp3
    assert "### level1: implementations side by side" in md


def test_warnings_once_per_cause_and_next_to_their_figures(full_report: tuple[str, str]) -> None:
    html, md = full_report
    warn = section(html, "warnings")
    causes = re.findall(r'<section id="warnings-([^"]+)"', warn)
    assert causes == ["oversubscribed", "target_missed", "high_variation", "recorded_warning"]
    over = tables(warn[warn.index('id="warnings-oversubscribed"'):])[0][1]
    # 4 points, each once, though each has both an oversubscribed metric and a recorded warning
    assert len(over) == len({r[1] for r in over}) == 4
    assert "ranks exceed cores" not in warn  # the same cause as oversubscribed = 1: listed once
    assert "loss curve is noisy" in warn
    level3 = section(html, "level3")
    assert level3.index('alt="speedup vs distributed.ranks"') < level3.index("Oversubscribed ranks on 4 point(s)")
    level1 = section(html, "level1")
    assert level1.index('alt="inference_latency vs') < level1.index("High variation on 4 point(s)")
    assert "Oversubscribed ranks (4)" in md


def test_level_content(full_report: tuple[str, str]) -> None:
    html, md = full_report
    assert html.count("data:image/png;base64,") >= 12  # no speedup figures: no pair is ranked without repetitions
    for text in ("Roofline", "Correctness vs the float64 reference", "throughput vs level1.batch_size",
                 "Loss and accuracy per epoch", "Acceptance thresholds",
                 "speedup vs distributed.ranks", "efficiency vs distributed.ranks", "Dashed: ideal",
                 "busbw_GBps vs distributed.message_bytes", "Speedup base case"):
        assert text in html, text
    # no CI is recorded for time to target: the caption does not claim one
    assert "Time to target accuracy (one training run per point: a single value, no CI)" in html
    assert "Time to target accuracy (median [95% CI])" not in html
    # failing correctness rows come first in their table, highlighted, with the point's verdict
    table = html[html.index("Correctness vs the float64 reference"):]
    table = table[: table.index("</table>")]
    first_row = table[table.index("<tbody>"):].split("</tr>")[0]
    assert 'class="bad"' in first_row and ">fail<" in first_row
    for text in ("## Failures", "## L0 operators", "## Provenance", "| stage | point_id | parameters | status |"):
        assert text in md
    # each level's section ends with what its metrics mean, as its Level.metrics declares (docs/reference/metrics.md)
    glossaries = [rows for head, rows in tables(html) if head == ["metric", "unit", "meaning"]]
    assert len(glossaries) == len(LEVELS)
    for level, rows in zip(LEVELS, glossaries):
        assert rows and all(level.metrics[name].about == about for name, _, about in rows if name in level.metrics)


def test_warnings_and_provenance(full_report: tuple[str, str]) -> None:
    html, md = full_report
    for text in ("Reproduction verdict: not reproduced", "Per-point seeds", "e3b0c44298fc1c14",
                 "Composed config (config.yaml)", "Environment record", "2.13.0"):
        assert text in html, text
    assert "Reproduction verdict: not reproduced" in md


def test_hostile_text_is_escaped(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    assert "<script" not in html.lower()
    assert "<img src=x" not in html
    assert re.search(r"&lt;script&gt;alert\((&quot;|&#34;)x(&quot;|&#34;)\)&lt;/script&gt;", html)
    assert html.count("&lt;script&gt;") >= 4  # error text, param value, description, environment
    assert HOSTILE in unescape(html)


def test_no_external_urls(full_report: tuple[str, str]) -> None:
    html, _ = full_report
    assert not EXTERNAL.search(html)
    for ref in re.findall(r"""(?:src|href)\s*=\s*"([^"]*)\"""", html):
        assert ref.startswith(("#", "data:image/png;base64,")), ref


def test_only_present_levels_and_no_failures_section(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level3",), failed=0, hostile=False, reproduce=False))
    publish(tmp_path)
    html = build_report(tmp_path)[0].read_text(encoding="utf-8")
    ids = section_ids(html)
    assert ids[0] == "overview" and "failures" not in ids
    assert "level3" in ids and not {"level0", "level1", "level2"} & set(ids)
    assert "Reproduction verdict" not in html


def test_tolerates_missing_metrics_manifest_and_side_tables(tmp_path: Path) -> None:
    make_run_dir(tmp_path, RunSpec(levels=("level0", "level2"), failed=0, hostile=False))
    publish(tmp_path)
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    (tmp_path / "curves.parquet").unlink()  # report falls back to the point records
    html = build_report(tmp_path)[0].read_text(encoding="utf-8")
    assert "Loss and accuracy per epoch" in html
    assert "d5pipe version" in html and "unknown" in html
    assert "train.optimizer is not swept in this run" in html


def test_missing_results_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(D5PipeError, match="no point records"):
        build_report(tmp_path)


def _one_point_report(tmp_path: Path, peaks: bool) -> str:
    make_run_dir(tmp_path, RunSpec(levels=("level0",), failed=0, hostile=False, reproduce=False,
                                   grids={"level0": {"operators.size": [64], "operators.impl": ["eager"]}}))
    if not peaks:  # as a run with the peak measurement off records it
        for path in (tmp_path / "points").glob("*/*.json"):
            rec = json.loads(path.read_text(encoding="utf-8"))
            rec["metrics"] = [m for m in rec["metrics"] if "peak" not in m["name"]]
            path.write_text(json.dumps(rec), encoding="utf-8")
    publish(tmp_path)
    return section(build_report(tmp_path)[0].read_text(encoding="utf-8"), "level0")


def test_one_point_gets_notes_instead_of_one_marker_figures(tmp_path: Path) -> None:
    html = _one_point_report(tmp_path / "bare", peaks=False)
    assert "data:image/png" not in html
    assert "time: a single point, so no figure" in html
    assert "Roofline: a single point and no measured peak, so no figure" in html
    assert any("gflops" in head for head, _ in tables(html))  # the value is still reported


def test_one_point_with_a_measured_peak_keeps_its_roofline(tmp_path: Path) -> None:
    html = _one_point_report(tmp_path / "peak", peaks=True)
    assert html.count("data:image/png") == 1 and "Roofline: achieved GFLOP/s" in html


def test_with_repetitions_the_side_by_side_ranks_with_ci_and_figure(tmp_path: Path) -> None:
    """Three repetitions per point (axis repeat): the speedup of compiled over eager is tested across
    them (Welch on the repetitions' medians) and drawn; naive still fails its check, unranked."""
    grid = {"operators.size": [128], "operators.impl": ["eager", "compiled", "naive"], "repeat": [0, 1, 2]}
    run = tmp_path / "reps"
    make_run_dir(run, RunSpec(levels=("level0",), failed=0, hostile=False, reproduce=False, acceptance=None,
                              grids={"level0": grid}))
    publish(run)
    html = build_report(run)[0].read_text(encoding="utf-8")
    cmp0 = html[html.index('id="compare-level0"'):html.index('id="table-level0"')]
    _head, rows = tables(cmp0)[0]
    by_variant = {r[2].split(" vs ")[0]: r for r in rows}
    assert by_variant["compiled"][-1] == "faster" and by_variant["compiled"][5].startswith("1.4")  # 1 / 0.7
    assert by_variant["naive"][-1].startswith("not compared: variant failed: check correct failed")
    assert "speedup vs eager" in cmp0 and "dashed: 1" in cmp0


def test_run_created_and_report_built_are_separate_and_not_reached_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_run_dir(run_dir, RunSpec(levels=("level2",)))
    rec_path = next(p for p in sorted((run_dir / "points" / "level2").glob("*.json"))
                    if json.loads(p.read_text())["status"] == "ok")
    rec = json.loads(rec_path.read_text())
    for m in rec["metrics"]:
        if m["name"] == "time_to_target_s":
            m["value"] = float("nan")  # trained to the end without reaching the target (as level 2 writes it)
    rec_path.write_text(json.dumps(rec))
    publish(run_dir)
    html, md = (p.read_text(encoding="utf-8") for p in build_report(run_dir))
    assert "run created 2025-01-01T00:00:00Z · report built 2" in html  # two dates, each named
    assert re.search(r"report built</td><td>\d{4}-\d\d-\d\dT", html)
    tta = [rows for head, rows in tables(section(html, "level2")) if "time_to_target_s" in head]
    assert tta and any("not reached" in row for row in tta[0])
    assert "not reached" in md


def test_the_optimizer_check_has_its_rows_in_the_level2_section(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_run_dir(run_dir, RunSpec(levels=("level2",), failed=0, skipped=0, extra_config={
        "train": {"reference_optimizer": "sgd", "reference_tolerance": 0.001}}))
    for i, rec_path in enumerate(sorted((run_dir / "points" / "level2").glob("*.json"))):
        rec = json.loads(rec_path.read_text())
        div = 2e-4 if i else 0.03  # the first point's optimizer drifted from its reference
        rec["metrics"] += [{"name": "optimizer_check", "value": "fail" if div > 0.001 else "pass", "unit": "",
                            "kind": "verdict", "ci_low": None, "ci_high": None, "samples": None},
                           {"name": "optimizer_divergence", "value": div, "unit": "", "kind": "numerical",
                            "ci_low": None, "ci_high": None, "samples": None}]
        rec_path.write_text(json.dumps(rec))
    publish(run_dir)
    html, _ = (p.read_text(encoding="utf-8") for p in build_report(run_dir))
    level2 = section(html, "level2")
    [(head, rows)] = [(h, r) for h, r in tables(level2) if "optimizer_check" in h and h[-1] == "verdict"]
    assert "optimizer_divergence" in head and "train.reference_tolerance = 0.001" in level2
    assert rows[0][head.index("optimizer_check")].startswith("fail") and rows[0][-1] == "fail"  # failing first
    assert all(r[head.index("optimizer_check")].startswith("pass") for r in rows[1:])


def test_coinciding_training_curves_stay_readable() -> None:
    """Three optimizers with the same learning-rate schedule: three distinct line styles and three
    direct labels, spread apart although the lines end at the same value."""
    import pandas as pd

    from d5pipe.results.report.plots import curves_figure

    frame = pd.DataFrame([{"label": f"train.optimizer={o}", "series": "lr", "step": e, "value": 0.01 * 0.5 ** e}
                          for o in ("adam", "sgd", "lion") for e in range(1, 6)])
    fig = curves_figure(frame, ["lr"])
    ax = fig.axes[0]
    styles = {(line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}
    assert len(styles) == 3
    labels = [t for t in ax.texts if t.get_text().startswith("train.optimizer=")]
    assert len(labels) == 3
    ys = sorted(t.get_position()[1] for t in labels)
    low, high = ax.get_ylim()
    assert min(b - a for a, b in zip(ys, ys[1:])) > 0.05 * (high - low)  # not on top of each other


def test_level3_speedup_and_efficiency_are_metrics_in_the_results(tmp_path: Path) -> None:
    from d5pipe.results.run_results import build_results

    run_dir = tmp_path / "run"
    make_run_dir(run_dir, RunSpec(levels=("level3",), failed=0, skipped=0, grids={
        "level3": {"distributed.ranks": [1, 2, 4], "distributed.backend": ["ddp", "mpi"]}}))
    df = build_results(run_dir).frame
    speed = df[df["metric"] == "speedup"]
    timed = df[df["metric"] == "time_per_step_s"]
    assert set(speed["point_id"]) == set(timed["point_id"])  # every training point gets its own
    one = speed[speed["distributed.ranks"] == 1]
    assert (one["value"] == 1.0).all()
    row = speed[(speed["distributed.ranks"] == 4) & (speed["distributed.backend"] == "ddp")].iloc[0]
    t = timed.set_index("point_id")["value"]
    base = timed[(timed["distributed.ranks"] == 1) & (timed["distributed.backend"] == "ddp")]["value"].iloc[0]
    assert row["value"] == pytest.approx(base / t[row["point_id"]])  # strong scaling: T1 / Tn
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    eff = df[(df["metric"] == "efficiency") & (df["point_id"] == row["point_id"])]["value"].iloc[0]
    assert eff == pytest.approx(row["value"] / 4)


def test_the_side_by_side_speedups_are_metrics_of_the_variants_points(tmp_path: Path) -> None:
    """results.parquet carries each compared pair on every repetition of the variant: speedup with
    its CI and verdict (speedup:<metric>) and its p-value (speedup_p:<metric>); failed pairs none."""
    from d5pipe.results.run_results import build_results

    grid = {"operators.size": [128], "operators.impl": ["eager", "compiled", "naive"], "repeat": [0, 1, 2]}
    run = tmp_path / "reps"
    make_run_dir(run, RunSpec(levels=("level0",), failed=0, hostile=False, reproduce=False, acceptance=None,
                              grids={"level0": grid}))
    res = build_results(run)
    pairs, out = res.comparisons, res.frame
    speed = out[out["metric"] == "speedup:time"]
    assert set(speed["operators.impl"]) == {"compiled"} and sorted(speed["repeat"]) == [0, 1, 2]
    row = speed.iloc[0]
    pair = pairs[pairs["variant"] == "compiled"].iloc[0]
    assert (row["value"], row["ci_low"], row["ci_high"], row["text"]) == (
        pair["speedup"], pair["ci_low"], pair["ci_high"], "faster")
    assert row["error"] == "vs operators.impl=eager"
    p = out[(out["metric"] == "speedup_p:time")]
    assert len(p) == 3 and (p["value"] == pair["p_value"]).all()
    assert (out["metric"].str.startswith(("speedup:", "speedup_p:"))).sum() == 6  # naive (failed its check) gets no row


def test_strategies_fold_their_repetitions_into_one_row_each_with_an_interval() -> None:
    """Issue 40: strategies side by side over repetitions -- one row a strategy, the mean [95%
    t-interval across repetitions], geometric for times; a single repetition keeps its own CI."""
    import pandas as pd

    from d5pipe.results.report.levels.distributed import strategies_table

    rows = []
    for s, base in (("allreduce", 1.0), ("ps_async", 2.0)):
        for rep, jitter in enumerate((0.9, 1.0, 1.1)):
            pid = f"{s}-{rep}"
            common = {"point_id": pid, "status": "ok", "distributed.strategy": s, "repeat": rep}
            rows += [{**common, "metric": "time_per_step_s", "value": base * jitter * 1e-3, "unit": "s",
                      "kind": "timing", "ci_low": base * jitter * 0.9e-3, "ci_high": base * jitter * 1.1e-3},
                     {**common, "metric": "test_accuracy", "value": 0.8 + 0.01 * rep, "unit": "",
                      "kind": "numerical", "ci_low": None, "ci_high": None}]
    [table] = strategies_table(pd.DataFrame(rows))
    assert [r[:2] for r in table.rows] == [["allreduce", "3"], ["ps_async", "3"]]
    time_cell, accuracy_cell = table.rows[1][2], table.rows[1][3]
    assert time_cell.startswith("1.99") and "[" in time_cell  # the geometric mean of 1.8, 2, 2.2 ms
    assert accuracy_cell.startswith("0.81 [")  # the mean of 0.80, 0.81, 0.82, with its t-interval
    [single] = strategies_table(pd.DataFrame([r for r in rows if r["repeat"] == 0]))
    assert single.columns[0] == "point_id" and len(single.rows) == 2
