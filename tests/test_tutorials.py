"""The local tutorials run as written (docs/tutorials/first-sweep.md, own-code.md): each page's
command blocks in order, in a fresh directory standing for the clone (tests/tutorial_pages.py). The
SLURM sandbox tutorial runs in tests/test_tutorial_slurm.py, with the SLURM tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tutorial_pages import TUTORIALS, clone_like, commands, run_page_ok

pytestmark = [pytest.mark.slow]


def test_every_tutorial_has_commands_and_is_in_the_site() -> None:
    pages = sorted(TUTORIALS.glob("*.md"))
    assert {p.name for p in pages} >= {"first-sweep.md", "own-code.md", "slurm-sandbox.md"}
    nav = (TUTORIALS.parents[1] / "mkdocs.yml").read_text(encoding="utf-8")
    for page in pages:
        assert commands(page), f"{page.name} has no sh block"
        assert f"tutorials/{page.name}" in nav, f"{page.name} is not in mkdocs.yml's nav"


def test_the_readme_is_short_and_one_link_from_the_sandbox_tutorial() -> None:
    readme = (TUTORIALS.parents[1] / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "](docs/tutorials/slurm-sandbox.md)" in readme
    assert readme.lstrip().startswith("# d5pipe") and "make run" in readme[:1500] and "make test" in readme[:1500]


@pytest.mark.timeout(1500)
def test_first_sweep(tmp_path: Path) -> None:
    work = clone_like(tmp_path / "clone")
    out = run_page_ok(TUTORIALS / "first-sweep.md", work, timeout_s=1400)
    assert "exit code 2" in out and "key 'operators.op'" in out  # the mistake made on purpose: one line, exit 2
    for run in ("first", "second"):
        df = pd.read_parquet(work / "runs" / run / "results.parquet")
        assert set(df.point_id[df.metric == "time"]) and (df.status == "ok").all()
        assert (work / "runs" / run / "report.html").is_file()


@pytest.mark.timeout(1500)
def test_own_code(tmp_path: Path) -> None:
    work = clone_like(tmp_path / "clone")
    out = run_page_ok(TUTORIALS / "own-code.md", work, timeout_s=1400)
    assert "outside the allow-list" in out and "exit code 2" in out  # nothing imported without --allow
    df = pd.read_parquet(work / "runs" / "own" / "results.parquet")
    assert (df.status == "ok").all()
    assert {"my_matmul", "matmul"} <= set(df["operators.op"].dropna())
    assert {"torch", "functional"} <= set(df["level1.runtime"].dropna())
    assert "stale" in out  # the edited operator's points are named stale by the plan
