"""Which planned points this environment cannot run, said before any job: the Python packages the
built-in runtimes (``level1.runtime``) and the zoo models (``model.name``) need. Torch-free and
import-free (``importlib.util.find_spec`` only looks). The points themselves are skipped with the
same reason when they run (d5pipe.levels.level1.runtimes, d5pipe.levels.zoo)."""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Callable
from typing import Any

from d5pipe.levels.schema import ZOO_NAMES

RUNTIME_PACKAGES: dict[str, str] = {"onnxruntime": "onnxruntime", "openvino": "openvino"}
"""The package each built-in non-PyTorch runtime imports (both also need onnxscript, which
torch.onnx.export uses)."""
ZOO_PACKAGE = "transformers"
MODEL_STAGES: tuple[str, ...] = ("level1", "level2", "level3")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _value(config: dict[str, Any], axes: tuple[str, ...], params: tuple[Any, ...], key: str) -> Any:
    if key in axes:
        return params[axes.index(key)]
    section, _, name = key.partition(".")
    return (config.get(section) or {}).get(name)


def unavailable(plan: Any, installed: Callable[[str], bool] = _installed) -> list[str]:
    """One line per (setting, missing package): ``level1.runtime=openvino: the Python package
    'openvino' is not installed here; 8 points will be skipped (pip install 'd5pipe[frameworks]')``."""
    counts: Counter[tuple[str, str]] = Counter()
    for stage, sp in plan.stages.items():
        if stage not in MODEL_STAGES:
            continue
        for params in sp.params:
            needs: list[tuple[str, str]] = []
            model = str(_value(plan.config, sp.axes, params, "model.name") or "")
            if model in ZOO_NAMES:
                needs.append((f"model.name={model}", ZOO_PACKAGE))
            if stage == "level1":
                runtime = str(_value(plan.config, sp.axes, params, "level1.runtime") or "torch")
                if runtime in RUNTIME_PACKAGES:
                    needs += [(f"level1.runtime={runtime}", RUNTIME_PACKAGES[runtime]),
                              (f"level1.runtime={runtime}", "onnxscript")]
            for what, package in needs:
                if not installed(package):
                    counts[(what, package)] += 1
    return [f"{what}: the Python package {package!r} is not installed here; {n} point(s) will be skipped "
            "(pip install 'd5pipe[frameworks]'; make install does)" for (what, package), n in sorted(counts.items())]
