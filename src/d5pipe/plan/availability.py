"""Which planned points this environment cannot run, said before any job: the Python packages each
level says a point needs (``requires`` of d5pipe.levels.stage.Level: a runtime's package, the
zoo's library). Torch-free and import-free (``importlib.util.find_spec`` only looks). The points
themselves are skipped with the same reason when they run (d5pipe.levels.level1.runtimes,
d5pipe.levels.zoo)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from d5pipe.levels.declare import installed as package_installed
from d5pipe.levels.registry import STAGES
from d5pipe.plan.point_config import REPEAT_AXIS, point_config, stage_base


def unavailable(plan: Any, installed: Callable[[str], bool] = package_installed) -> list[str]:
    """One line per (setting, missing package): ``level1.runtime=openvino: the Python package
    'openvino' is not installed here; 8 points will be skipped (pip install 'd5pipe[frameworks]')``.
    Each distinct point config is asked once."""
    counts: Counter[tuple[str, str]] = Counter()
    for stage, sp in plan.stages.items():
        level = STAGES[stage]
        if not level.has_requirements:
            continue
        base = stage_base(plan.config, stage)
        seen: dict[tuple[Any, ...], list[tuple[str, str]]] = {}
        # the repetition index is the last axis when present: a configuration's repetitions share it
        n = len(sp.axes) - (REPEAT_AXIS in sp.axes)
        assert REPEAT_AXIS not in sp.axes[:n]
        for params in sp.params:
            key = params[:n]
            needs = seen.get(key)
            if needs is None:
                needs = seen[key] = level.requires(point_config(base, dict(zip(sp.axes[:n], key))))
            for what, package in needs:
                if not installed(package):
                    counts[(what, package)] += 1
    return [f"{what}: the Python package {package!r} is not installed here; {n} point(s) will be skipped "
            "(pip install 'd5pipe[frameworks]'; make install does)" for (what, package), n in sorted(counts.items())]
