"""Level 1 declares itself (d5pipe.levels.stage.Level): network processing on runtimes, its
schema, checks, cost, what it needs installed, compared factors. Torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5pipe.core.atomic import file_sha256
from d5pipe.core.fields import setting
from d5pipe.levels.cost_model import COMPILE_S, POINT_FIXED_S, timed_s
from d5pipe.levels.level1 import validate
from d5pipe.levels.level1.loadgen import OFFLINE_HEADROOM
from d5pipe.levels.level1.metrics import NETWORK_METRICS
from d5pipe.levels.level1.runtimes import declaration
from d5pipe.levels.level1.schema import SECTION, Level1Conf
from d5pipe.levels.schema import model_requires
from d5pipe.levels.stage import Factor, Level, point_runner


def cost(cfg: Mapping[str, Any]) -> float:
    """Two timed call sites (inference, forward+backward), two more short passes with memory
    measurement; ``compile`` compiles both. Under a LoadGen scenario (no timed call sites): its
    runs (the peak-QPS search's probes among them), each priced at ``level1.loadgen_min_duration_s``
    (offline's at :data:`~d5pipe.levels.level1.loadgen.OFFLINE_HEADROOM` times it)."""
    conf = cfg.get(SECTION)
    if setting(conf, Level1Conf, "scenario") != "none":
        runs = 1 + (int(setting(conf, Level1Conf, "loadgen_peak_probes"))
                    if setting(conf, Level1Conf, "loadgen_find_peak_qps") else 0)
        compiled = setting(conf, Level1Conf, "impl") == "compile" or setting(conf, Level1Conf, "runtime") == "compile"
        per_run = float(setting(conf, Level1Conf, "loadgen_min_duration_s"))
        if setting(conf, Level1Conf, "scenario") == "offline":  # its one query is sized to outlast the minimum
            per_run *= OFFLINE_HEADROOM
        return POINT_FIXED_S + runs * per_run + (COMPILE_S if compiled else 0.0)
    sites = 2 + (2 if setting(conf, Level1Conf, "measure_memory") else 0)
    compiled = setting(conf, Level1Conf, "impl") == "compile"
    return POINT_FIXED_S + timed_s(cfg, sites) + (2 * COMPILE_S if compiled else 0.0)


def requires(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The zoo's library for a zoo model; the packages the runtime's declaration names."""
    runtime = str(setting(cfg.get(SECTION), Level1Conf, "runtime") or "torch")
    return model_requires(cfg) + [(f"{SECTION}.runtime={runtime}", p) for p in declaration(runtime).packages]


def identity_files(cfg: Mapping[str, Any]) -> dict[str, str]:
    """``{"file:<path>": sha256}`` of a network the point reads from a file (``level1.onnx_file``):
    its content, not only its path, is part of the point's identity."""
    path = (cfg.get(SECTION) or {}).get("onnx_file")
    return {f"file:{path}": file_sha256(str(path))} if path else {}


LEVEL = Level(
    name="level1", title="L1 network processing", sections=("model", "dataset", SECTION, "timer", "placement"),
    schemas={SECTION: Level1Conf}, check_point=validate.check_point, cost=cost,
    runner=point_runner("d5pipe.levels.level1.point"),
    used_targets=validate.used_targets, check_targets=validate.check_targets, requires=requires, identity_files=identity_files, needs_data=True,
    metrics=NETWORK_METRICS, profiled_passes=2,
    factors=(Factor(f"{SECTION}.impl", "eager", ("inference_latency", "fwd_bwd_time"), "implementations"),
             Factor(f"{SECTION}.runtime", "torch", ("inference_latency", "loadgen_latency_p90", "loadgen_qps"), "runtimes"),
             Factor(f"{SECTION}.micro_batches", "1", ("fwd_bwd_time",), "micro-batching",
                    quality="peak_memory_fwd_bwd")),
)
