"""Render report.html in headless Chromium (Debian package ``chromium``): not blank, no console output.

Needs ``chromium`` on PATH (``apt-get install -y chromium``); the test fails, not skips, without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))

from d5pipe.results.report import build_report  # noqa: E402
from report_fixtures import RunSpec, make_run_dir, publish  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CONSOLE = re.compile(r":CONSOLE[:(]")


def render(page: Path, shot: Path, profile: Path) -> str:
    """Screenshot ``page``; return Chromium's stderr log (console messages appear as CONSOLE lines)."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: apt-get install -y chromium"
    profile.mkdir()
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
        f"--screenshot={shot}", "--window-size=1280,2000", page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.exists(), proc.stderr[-2000:]
    return proc.stderr


TOPS_SCRIPT = (
    "<script>document.body.setAttribute('data-tops', JSON.stringify(Object.fromEntries("
    "Array.from(document.querySelectorAll('main > section')).map("
    "s => [s.id, [s.getBoundingClientRect().top, s.getBoundingClientRect().bottom]]))))</script>"
)


def probe_layout(page: Path, tmp: Path, script: str, attr: str, width: int = 1280) -> Any:
    """What ``script`` stored as JSON in ``<body attr=...>`` once Chromium laid ``page`` out.

    The report has no script (by design), so a copy with one probe script is rendered and its DOM
    dumped; the layout is the report's own (same HTML and CSS, the given window width).
    """
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: apt-get install -y chromium"
    probe = tmp / f"{attr}-probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    profile = tmp / f"{attr}-profile"
    profile.mkdir()
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--window-size={width},2000", "--dump-dom", probe.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(rf'{attr}="([^"]*)"', proc.stdout)
    assert m, proc.stdout[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def section_boxes(page: Path, tmp: Path) -> dict[str, tuple[float, float]]:
    """Top and bottom (CSS px) of each top-level section as Chromium lays the page out (1280 px)."""
    boxes = probe_layout(page, tmp, TOPS_SCRIPT, "data-tops")
    return {k: (float(v[0]), float(v[1])) for k, v in boxes.items()}


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if CONSOLE.search(line)]


def test_console_detection_works(tmp_path: Path) -> None:
    """The console check catches a page that logs an error (so the real check can fail)."""
    page = tmp_path / "bad.html"
    page.write_text('<p>x</p><script>console.error("d5-marker")</script>', encoding="utf-8")
    log = render(page, tmp_path / "bad.png", tmp_path / "profile")
    assert any("d5-marker" in line for line in console_lines(log))


def test_report_renders_and_is_not_blank(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_run_dir(run_dir, RunSpec(levels=("level0", "level3"), failed=1))
    publish(run_dir)
    html_path, _ = build_report(run_dir)
    shot = tmp_path / "report.png"
    log = render(html_path, shot, tmp_path / "profile")
    assert console_lines(log) == []
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (2000, 1280)
    non_white = float((pixels < 245).mean())
    assert non_white > 0.03, f"screenshot is nearly blank ({non_white:.1%} non-white)"
    assert pixels.std() > 20.0
    # the dark header band is at the top: the CSS was applied
    assert pixels[:40].mean() < 120.0
    # the Failures section is laid out above the Overview and every level section, on the first screen
    boxes = section_boxes(html_path, tmp_path)
    order = sorted(boxes, key=lambda k: boxes[k][0])
    assert order[:3] == ["failures", "overview", "level0"], order
    top, bottom = boxes["failures"]
    assert 0 < top < bottom <= boxes["overview"][0] < boxes["level0"][0] < boxes["level3"][0]
    assert bottom < pixels.shape[0], "the Failures section is not on the first screen"
    # ... and the screenshot shows it there: its failing rows are tinted red (tr.bad, #fde8e8)
    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int32)
    red = (rgb[..., 0] > 240) & (rgb[..., 0] - rgb[..., 1] > 12) & (rgb[..., 0] - rgb[..., 2] > 12)
    band = red[int(top):int(bottom)]
    assert band.mean() > 0.01, f"no red failure rows in the Failures band ({band.mean():.2%})"
    # failing rows concentrate there (a level's side-by-side answers come next and list, in red, the
    # pairs a failed point could not join)
    assert band.mean() > red[int(bottom):].mean()


WIDTH_SCRIPT = (
    "<script>document.body.setAttribute('data-tables', JSON.stringify(Array.from(document.querySelectorAll('table'))"
    ".map(t => [t.getBoundingClientRect().right, t.scrollWidth, t.clientWidth, "
    "Array.from(t.querySelectorAll('th')).map(h => h.textContent)])))</script>"
)


def table_boxes(page: Path, tmp: Path, width: int) -> list[tuple[float, int, int, list[str]]]:
    """Per table as Chromium lays it out at ``width`` px: right edge, scroll and client width, headers."""
    return [tuple(t) for t in probe_layout(page, tmp, WIDTH_SCRIPT, "data-tables", width)]


def test_no_table_is_cut_off_at_1400_px_and_level3_speedup_is_a_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    wide = {"level1": {"model.name": ["mlp", "cnn"], "level1.batch_size": [16, 64],
                       "level1.dtype": ["float32", "bfloat16"], "level1.impl": ["eager", "compile"]}}
    make_run_dir(run_dir, RunSpec(grids=wide))
    publish(run_dir)
    html_path, _ = build_report(run_dir)
    boxes = table_boxes(html_path, tmp_path, 1400)
    assert len(boxes) > 5
    for right, scroll_w, client_w, headers in boxes:
        assert right <= 1400 and scroll_w <= client_w + 1, (right, scroll_w, client_w, headers)  # all on screen
    assert any("speedup" in headers and "efficiency" in headers for *_, headers in boxes)
