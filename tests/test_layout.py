"""The house a newcomer reads: folder = layer, small modules, levels of one shape, one registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from d5pipe.levels.registry import STAGES
from d5pipe.results.report.levels import SECTIONS
from tests.test_layers import ORDER

PKG = Path(__file__).resolve().parents[1] / "src" / "d5pipe"
LAYERS = set(ORDER)
MAX_LINES = 400


def test_top_level_is_the_package_face_and_the_layers() -> None:
    entries = {p.name for p in PKG.iterdir() if p.name != "__pycache__"}
    assert entries == LAYERS | {"__init__.py"}


def test_every_module_is_small() -> None:
    big = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_LINES}
    assert not big


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_each_level_package_has_the_same_shape(stage: str) -> None:
    names = {p.name for p in (PKG / "levels" / stage).glob("*.py")}
    assert {"__init__.py", "stage.py", "schema.py", "validate.py", "point.py"} <= names
    level = STAGES[stage]
    assert level.name == stage and callable(level.check_point) and callable(level.cost)
    assert callable(level.runner()) and callable(SECTIONS[stage])


def test_checks_and_schemas_are_torch_free() -> None:
    """What `d5pipe plan` imports (registry, the levels' declarations, schemas, validators) must
    not pull torch in."""
    code = ("import sys\nfrom d5pipe.levels.registry import STAGES\n"
            "import d5pipe.config.schema, d5pipe.config.validate, d5pipe.plan.build, d5pipe.plan.availability\n"
            "print(sorted(m for m in ('torch', 'scipy', 'pandas') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
