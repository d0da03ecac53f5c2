"""Level 1 checks before any job (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from d5pipe.core.errors import D5PipeError
from d5pipe.core.fields import setting
from d5pipe.levels.config_checks import check_device_name, check_memory_storage, check_micro_batches, section
from d5pipe.levels.level1.runtimes import RUNTIMES, declaration
from d5pipe.levels.level1.schema import Level1Conf
from d5pipe.levels.schema import check_dataset, check_model
from d5pipe.levels.targets import check_slots
from d5pipe.levels.targets import used_targets as _used
from d5pipe.measure.timer_schema import check_timer

SLOTS: tuple[str, ...] = ("model", "model_reference", "dataset", "runtime")
"""The plug-in slots a level-1 point uses (d5pipe.levels.targets.SLOTS)."""


def check_point(cfg: Mapping[str, Any]) -> None:
    """One level-1 point's resolved config (``model``, ``dataset``, ``level1``, ``timer``)."""
    check_slots(cfg, SLOTS)
    check_model(section(cfg, "model"))
    check_dataset(section(cfg, "dataset"))
    check_memory_storage(cfg, "level 1")
    level1 = section(cfg, "level1")
    check_device_name(setting(level1, Level1Conf, "device"), "level1.device")
    check_onnx_file(level1.get("onnx_file"))
    runtime = str(setting(level1, Level1Conf, "runtime"))
    if level1.get("onnx_file") and declaration(runtime).on_torch:
        onnx = ", ".join(r.name for r in RUNTIMES.values() if r.reads_onnx)
        raise D5PipeError("config error: key 'level1.runtime': a network given as level1.onnx_file runs on an "
                          f"ONNX runtime ({onnx}), not on {runtime!r}")
    impl = str(setting(level1, Level1Conf, "impl"))
    if impl not in declaration(runtime).impls:
        takes = ", ".join(r.name for r in RUNTIMES.values() if impl in r.impls)
        raise D5PipeError(f"config error: key 'level1.impl': {impl!r} applies to level1.runtime={takes} "
                          f"only (got runtime {runtime!r}; use impl eager)")
    check_micro_batches(level1, Level1Conf, "level1")
    check_loadgen(level1)
    check_timer(dict(section(cfg, "timer")))


def check_loadgen(level1: Mapping[str, Any]) -> None:
    """The LoadGen settings of one point that hold together (each value's range is the schema's)."""
    low, high = (float(setting(level1, Level1Conf, k)) for k in ("loadgen_min_duration_s", "loadgen_max_duration_s"))
    if high < low:
        raise D5PipeError(f"config error: key 'level1.loadgen_max_duration_s': {high:g} is below "
                          f"level1.loadgen_min_duration_s={low:g}")
    scenario = str(setting(level1, Level1Conf, "scenario"))
    if setting(level1, Level1Conf, "loadgen_find_peak_qps") and scenario != "server":
        raise D5PipeError("config error: key 'level1.loadgen_find_peak_qps': the peak-QPS search applies to "
                          f"level1.scenario=server only (got {scenario!r})")


def check_onnx_file(value: Any) -> None:
    """``level1.onnx_file``: empty, or an absolute path to an existing ``.onnx`` file (one line otherwise)."""
    if value in (None, ""):
        return
    path = Path(str(value))
    if not path.is_absolute():
        raise D5PipeError(f"config error: key 'level1.onnx_file': {value!r} must be an absolute path "
                          "(the shard jobs run in the run directory)")
    if path.suffix != ".onnx" or not path.is_file():
        raise D5PipeError(f"config error: key 'level1.onnx_file': {value!r} is not an existing .onnx file")


used_targets = partial(_used, slots=SLOTS)
"""``(key, dotted path)`` of the user targets a level1 point uses (its code hash covers them)."""
check_targets = partial(check_slots, slots=SLOTS)
"""The plug-in registries and selectors against the runner's allow-list; nothing imported."""
