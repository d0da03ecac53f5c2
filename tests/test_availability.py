"""``d5pipe plan`` names the points this environment cannot run (d5pipe.plan.availability)."""

from __future__ import annotations

from d5pipe.execute.run import load_plan
from d5pipe.plan.availability import unavailable


def test_plan_names_the_points_of_a_runtime_or_model_library_that_is_not_installed() -> None:
    plan = load_plan("frameworks", [], [], None)  # 2 models x 2 batch sizes x 3 runtimes x repetitions
    sp = plan.stages["level1"]
    per_runtime = sum(1 for p in sp.params if p[sp.axes.index("level1.runtime")] == "openvino")
    per_model = sum(1 for p in sp.params if p[sp.axes.index("model.name")] == "resnet50")
    assert per_runtime == len(sp.params) // 3 and per_model == len(sp.params) // 2
    assert unavailable(plan) == []  # make install installs the frameworks extra
    without_openvino = unavailable(plan, installed=lambda package: package != "openvino")
    assert without_openvino == [f"level1.runtime=openvino: the Python package 'openvino' is not installed here; "
                                f"{per_runtime} point(s) will be skipped (pip install 'd5pipe[frameworks]'; "
                                "make install does)"]
    without_transformers = unavailable(plan, installed=lambda package: package != "transformers")
    assert [line.split(":")[0] for line in without_transformers] == ["model.name=resnet50", "model.name=vit_b16"]
    assert all(f"{per_model} point(s)" in line for line in without_transformers)


def test_plain_pytorch_points_need_nothing_optional() -> None:
    plan = load_plan("quickstart", [], [], None)
    assert unavailable(plan, installed=lambda package: False) == []
