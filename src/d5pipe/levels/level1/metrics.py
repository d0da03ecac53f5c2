"""A network point's metrics: what each name means (:data:`NETWORK_METRICS`, the level's
``Level.metrics``; docs/reference/metrics.md and the report read it), the names of each measured
mode (:data:`MODE_NAMES`) and :func:`metric`, which builds a metric as declared. Torch-free."""

from __future__ import annotations

from functools import partial

from d5pipe.core.outcome import Declared, declared_metric
from d5pipe.levels.verify import MICRO_BATCH_METRICS
from d5pipe.measure.energy import energy_declared
from d5pipe.measure.flops import flop_declared
from d5pipe.measure.stats import timing_declared

MODE_NAMES = {"inference": ("inference_latency", "inference_throughput"),
              "fwd_bwd": ("fwd_bwd_time", "train_throughput")}
"""Per measured mode, the names of its time and of its rate; the time's raw samples are ``<time>_s``."""
MODE_ABOUT = {"inference": "a batch's inference (eval mode, torch.inference_mode)",
              "fwd_bwd": "a batch's forward, cross-entropy and backward (train mode, no optimizer step)"}


def _mode(mode: str) -> dict[str, Declared]:
    """What a mode reports (d5pipe.levels.level1.point._measure_mode)."""
    time, rate = MODE_NAMES[mode]
    samples, what = f"{time}_s", MODE_ABOUT[mode]
    return {**timing_declared(time, "s", samples, f"{what}: median [95% CI]", f"{time}_"),
            rate: Declared("samples/s", "timing", samples, f"level1.batch_size over {time}, CI carried through"),
            f"compile_{mode}_s": Declared("s", "info", None, f"a compiled network's first call of {mode} "
                                                            "(compilation included), never timed with the rest"),
            f"peak_memory_{mode}": Declared("B", "numerical", None, f"peak tensor memory of {mode} (PyTorch's "
                                                                    "allocator: CUDA or CPU)"),
            **energy_declared("sample", f"_{mode}", f"the timed batches of {mode}"),
            **flop_declared(f"_{mode}", rate, samples)}


_LG_SAMPLE = "a LoadGen sample is one batch of level1.batch_size"
LOADGEN_METRICS: dict[str, Declared] = {
    "loadgen_valid": Declared("", "verdict", None, "MLPerf LoadGen's own verdict on the run of level1.scenario "
                                                   "(result_validity: pass for VALID; a fail names LoadGen's reasons)"),
    **{f"loadgen_latency_p{p}": Declared("s", "timing", None, f"LoadGen's {p}th percentile of query latency "
                                                             "(single_stream, multi_stream, server)")
       for p in (50, 90, 99)},
    "loadgen_qps": Declared("batches/s", "timing", None, "LoadGen's rate: single_stream's QPS with LoadGen's overhead, "
                                                         f"server's completed and offline's samples per second ({_LG_SAMPLE})"),
    "loadgen_throughput": Declared("samples/s", "timing", None, "loadgen_qps x level1.batch_size"),
    "loadgen_query_count": Declared("", "info", None, "the queries LoadGen issued in the run"),
    "loadgen_peak_qps": Declared("batches/s", "timing", None, "server, level1.loadgen_find_peak_qps: the highest QPS "
                                                              "whose LoadGen run was valid, by bisection (0: none was)"),
}
"""What a point under MLPerf LoadGen reports (d5pipe.levels.level1.loadgen)."""


NETWORK_METRICS: dict[str, Declared] = {
    "n_parameters": Declared("", "count", None, "the model's parameters"),
    **_mode("inference"),
    **_mode("fwd_bwd"),
    "output_check": Declared("", "verdict", None, "the outputs against the float64 eager reference on the same batch: "
                                                  "pass, fail or undetectable (level1.detect_rel_error)"),
    "output_err_l2": Declared("", "numerical", None, "the outputs' relative L2 error against that reference"),
    "output_err_max_rel": Declared("", "numerical", None, "the largest error relative to the reference's largest value"),
    **MICRO_BATCH_METRICS,
    **LOADGEN_METRICS,
}
"""Every metric name of a network point and its one meaning."""


metric = partial(declared_metric, NETWORK_METRICS)
"""``metric(name, value, kind=None, ci=None, detail=None)``: ``name``'s Metric as :data:`NETWORK_METRICS`
declares it."""
