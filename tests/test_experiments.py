"""Every shipped experiment composes, validates and plans (and its plan is non-empty)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5pipe.execute.run import load_plan
from d5pipe.levels.registry import STAGE_NAMES

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", SHIPPED)
def test_shipped_experiment_plans(experiment: str) -> None:
    plan = load_plan(experiment, [])
    assert plan.experiment == experiment
    assert plan.stages and set(plan.stages) <= set(STAGE_NAMES)
    for sp in plan.stages.values():
        assert sp.point_ids and sp.n_shards >= 1
        assert len(set(sp.point_ids)) == len(sp.point_ids)


@pytest.mark.parametrize("experiment", SHIPPED)
def test_shipped_experiment_plans_for_slurm(experiment: str) -> None:
    assert load_plan(experiment, [], executor="slurm").config["executor"]["name"] == "slurm"


def test_the_stage_registry_drives_the_plan_index_schema() -> None:
    from d5pipe.execute.snakefile_api import plan_index_schema

    names = plan_index_schema()["properties"]["stages"]["propertyNames"]["enum"]
    assert names == list(STAGE_NAMES)
