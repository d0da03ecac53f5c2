"""Schema of the ``level1`` section (network processing). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from d5pipe.core.fields import at_least, choice, later, positive
from d5pipe.levels.schema import DTYPES

IMPLS: tuple[str, ...] = ("eager", "compile")
SECTION = "level1"
"""The config section of level 1 (named after the level)."""
LAYOUTS: tuple[str, ...] = ("contiguous", "channels_last")
COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SCENARIOS: tuple[str, ...] = ("none", "single_stream", "multi_stream", "offline", "server")
"""``level1.scenario``: d5pipe's own timer (``none``) or one of MLPerf LoadGen's scenarios."""


@dataclass
class Level1Conf:
    batch_size: int = at_least(32, 1)
    """Samples per inference batch and per forward+backward."""
    dtype: str = choice("float32", DTYPES)
    """``float32``, ``float64``, ``bfloat16`` or ``float16``."""
    impl: str = choice("eager", IMPLS)
    """``eager`` or ``compile`` (torch.compile)."""
    compile_mode: str = choice("default", COMPILE_MODES)
    """``mode`` passed to torch.compile when ``impl: compile``."""
    runtime: str = "torch"
    """What executes the network: ``torch`` (PyTorch, ``impl`` eager or compile), ``compile``
    (``torch.compile`` of the network, the same as ``torch`` with ``impl: compile``),
    ``onnxruntime`` or ``openvino`` (the network exported once to ONNX), or a key of
    ``custom_runtimes``."""
    onnx_file: str = ""
    """A network the user brings as an ``.onnx`` file (absolute path), run on an ONNX runtime and
    checked against the ONNX reference evaluator in float64; its sha256 is part of the point's
    identity. Empty: the network is ``model``."""
    custom_runtimes: dict[str, Any] = field(default_factory=dict)
    """User runtimes: name -> target (``_target_`` under the allow-list of the person running d5pipe) returning a
    d5pipe.levels.level1.runtimes.contract.Engine."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    layout: str = choice("contiguous", LAYOUTS)
    """``contiguous`` or ``channels_last`` (4-D inputs, i.e. the CNN)."""
    fwd_bwd: bool = True
    """Measure forward+backward too (``fwd_bwd_time``, ``train_throughput``) on the PyTorch runtimes;
    false: inference only (the other runtimes measure inference only)."""
    measure_memory: bool = True
    """Record peak tensor memory of inference and of forward+backward."""
    micro_batches: int = later(1, min=1)
    """Forward+backward of the batch in this many micro-batches whose gradients accumulate (the
    same gradient, less activation memory: ``peak_memory_fwd_bwd`` against 1); inference is
    unchanged. ``micro_batch_check`` compares the two gradients once and fails where a layer
    couples the samples of a batch (BatchNorm)."""
    micro_batch_tolerance: float = later(1e-4, min=0.0)
    """Largest relative L2 error of the accumulated gradient against the full batch's."""
    peak: bool = True
    """Measure the machine's matmul FLOP/s in ``dtype`` once per shard process and report the
    model's achieved FLOP/s as ``pct_peak_flops_*`` (FLOPs are counted either way)."""
    output_check: bool = True
    """Compare the outputs with the float64 eager reference on the same batch (``output_check``)."""
    output_tol_l2: Optional[float] = at_least(None, 0.0)  # noqa: UP045
    """Relative L2 error accepted by ``output_check``; null: the dtype's default (d5pipe.levels.verify)."""
    output_tol_max_rel: Optional[float] = at_least(None, 0.0)  # noqa: UP045
    """Max error relative to the output's largest value; null: the dtype's default."""
    detect_rel_error: float = positive(0.01)
    """A tolerance at or above this relative error cannot see it: ``output_check`` says ``undetectable``."""
    scenario: str = later("none", choices=SCENARIOS)
    """``none``: d5pipe's timer measures the network (inference and forward+backward). ``single_stream``,
    ``multi_stream``, ``offline`` or ``server``: MLCommons LoadGen drives the point's runtime as its
    system under test in that scenario (inference only; a LoadGen sample is one batch of
    ``batch_size``) and the point reports LoadGen's figures (d5pipe.levels.level1.loadgen)."""
    loadgen_target_latency_ms: float = later(100.0, gt=0)
    """``server``: the latency bound a query must meet at ``loadgen_percentile`` (LoadGen's
    ``server_target_latency_ns``), milliseconds."""
    loadgen_target_qps: float = later(0.0, min=0.0)
    """``server``: queries per second LoadGen issues (Poisson arrivals); ``offline``: the QPS LoadGen
    expects, which sizes its one query. 0: from a short calibration of one batch's latency ``L``
    (server ``0.5 / L``, offline ``2 / L``: its one query then lasts about twice the minimum duration)."""
    loadgen_min_duration_s: float = later(1.0, gt=0)
    """LoadGen's minimum test duration (``min_duration_ms``; its own default is 10 minutes)."""
    loadgen_max_duration_s: float = later(10.0, gt=0)
    """LoadGen stops issuing queries after this long (``max_duration_ms``); at least ``loadgen_min_duration_s``."""
    loadgen_min_query_count: int = later(100, min=1)
    """LoadGen's minimum number of queries (``min_query_count``; offline issues one). Its early
    stopping wants at least 64 queries for a 90th percentile and 662 for a 99th."""
    loadgen_percentile: float = later(90.0, gt=0, lt=100)
    """The latency percentile LoadGen's result and early stopping use (single_stream, multi_stream,
    and server's latency bound), in percent."""
    loadgen_samples_per_query: int = later(8, min=1)
    """``multi_stream``: samples (batches) per query (LoadGen's ``multi_stream_samples_per_query``)."""
    loadgen_find_peak_qps: bool = later(False)
    """``server``: after the configured run, search by bisection for the highest QPS whose LoadGen run
    is valid (the latency bound met), each probe a LoadGen run; reported as ``loadgen_peak_qps``."""
    loadgen_peak_probes: int = later(5, min=2, max=20)
    """How many LoadGen runs the peak-QPS search makes."""
