"""A level is one unit (d5pipe.levels.stage, d5pipe.levels.registry): nothing outside a level's
package spells its name, and docs/architecture.md's "Adding a level" is enough to add one."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import d5pipe
from d5pipe.levels.registry import LEVELS, STAGE_NAMES, STAGES

SRC = Path(d5pipe.__file__).resolve().parent
ROOT = SRC.parents[1]


def _literals(path: Path, names: tuple[str, ...]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_no_module_outside_a_level_package_spells_its_name() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).parts
        if rel[0] == "levels" and len(rel) > 2 and rel[1] in STAGE_NAMES:
            continue  # the level's own package
        offenders += _literals(path, STAGE_NAMES)
    assert offenders == [], "\n".join(offenders)


def test_the_registry_is_the_levels_own_declarations() -> None:
    assert STAGE_NAMES == tuple(level.name for level in LEVELS)
    for level in LEVELS:
        assert level.sections and level.schemas and callable(level.cost) and callable(level.check_point)
        assert set(level.schemas) <= set(level.sections)
        assert type(level).__module__ == "d5pipe.levels.stage"
    assert sum(bool(level.factors) for level in LEVELS) == len(LEVELS)  # each compares something
    assert [level.name for level in LEVELS if level.derive is not None] == [STAGES[STAGE_NAMES[-1]].name]


TOY = {
    "__init__.py": '"""Level 4 of the toy test: it adds up ``toy.n`` numbers."""\n',
    "schema.py": '''
        from dataclasses import dataclass

        from d5pipe.core.fields import at_least


        @dataclass
        class ToyConf:
            n: int = at_least(3, 1)
            """How many numbers a point adds."""
        ''',
    "validate.py": '''
        from d5pipe.core.errors import D5PipeError


        def check_point(cfg):
            if int((cfg.get("toy") or {}).get("n", 3)) > 1000:
                raise D5PipeError("config error: key 'toy.n': at most 1000")
        ''',
    "point.py": '''
        from d5pipe.core.outcome import Metric, PointOutcome


        def run_point(ctx):
            n = int(ctx.config["toy"]["n"])
            return PointOutcome(metrics=[Metric("total", float(sum(range(n))), "", "deterministic")])
        ''',
    "stage.py": '''
        from d5pipe.levels.level4 import validate
        from d5pipe.levels.level4.schema import ToyConf
        from d5pipe.levels.stage import Factor, Level


        def runner():
            from d5pipe.levels.level4.point import run_point

            return run_point


        LEVEL = Level(name="level4", title="L4 toy", sections=("toy", "placement"), schemas={"toy": ToyConf},
                      check_point=validate.check_point, cost=lambda cfg: 0.01, runner=runner,
                      factors=(Factor("toy.n", None, ("total",), "sizes"),))
        ''',
}


@pytest.mark.slow
def test_a_toy_fifth_level_added_by_the_paragraph_alone_plans_and_runs(tmp_path: Path) -> None:
    """A copy of the project; in it, the toy level added exactly as docs/architecture.md says:
    its package, and one import and one entry in levels/registry.py. Then plan and run it."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "`from d5pipe.levels.levelN.stage import LEVEL as LEVELN` and `LEVELN` to `LEVELS`" in doc
    tree = tmp_path / "copy"
    for part in ("src", "conf", "workflow", "profiles"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "Snakefile", tree / "Snakefile")
    pkg = tree / "src" / "d5pipe" / "levels" / "level4"
    pkg.mkdir()
    for name, text in TOY.items():
        (pkg / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    registry = tree / "src" / "d5pipe" / "levels" / "registry.py"
    code = registry.read_text(encoding="utf-8")
    code = code.replace("from d5pipe.levels.level3.stage import LEVEL as LEVEL3\n",
                        "from d5pipe.levels.level3.stage import LEVEL as LEVEL3\n"
                        "from d5pipe.levels.level4.stage import LEVEL as LEVEL4\n")
    code = code.replace("(LEVEL0, LEVEL1, LEVEL2, LEVEL3)", "(LEVEL0, LEVEL1, LEVEL2, LEVEL3, LEVEL4)")
    registry.write_text(code, encoding="utf-8")
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "toy.yaml").write_text("# @package _global_\nname: toy\nstages: [level4]\nrepetitions: 1\n"
                                   "sweep:\n  grid:\n    toy.n: [3, 5, 8]\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "d5pipe.cli.main"]
    plan = subprocess.run([*cli, "plan", "toy", "--config-dir", str(tmp_path / "conf"), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    stages = {s["stage"]: s for s in json.loads(plan.stdout)["stages"]}
    assert stages["level4"]["points"] == 3
    bad = subprocess.run([*cli, "plan", "toy", "--config-dir", str(tmp_path / "conf"), "toy.n=5000"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and "toy.n" in bad.stderr  # its own check, before any job
    out = tmp_path / "run"
    run = subprocess.run([*cli, "run", "toy", "--config-dir", str(tmp_path / "conf"), "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    totals = df[df["metric"] == "total"].set_index("toy.n")["value"].to_dict()
    assert totals == {3: 3.0, 5: 10.0, 8: 28.0}
    assert "L4 toy" in (out / "report.html").read_text(encoding="utf-8")
