"""The thread pools that TensorFlow and XLA (JAX) fix once per process, pinned for a point or refused.

TensorFlow sizes its intra- and inter-op pools when its runtime starts, XLA its CPU pools from
``XLA_FLAGS`` when jax's backend starts (its first computation, not its import: importing
TensorFlow imports jax); neither can change them afterwards. A shard's worker runs many points in
one process, so a point that asks for other threads than the process's pools already have would
silently compute with the earlier point's. Level 0's engines and level 2's frameworks import both
through here, for every point: the pools are pinned to the point's threads while they are still
open, kept when they already are what it asks, and otherwise the point fails with
:class:`ThreadsFixed` (its reason says to run it in a process of its own). Within a run this cannot
happen: a stage's threads are its ``executor.resources.<stage>.cpus_per_task``, the same for every
point of every shard of the stage (d5pipe.execute.snakefile_api.threads_of). Torch-free.

An ``XLA_FLAGS`` that the environment sets is the user's, kept and recorded, never refused; so is a
backend that other code started before d5pipe could size it (XLA's defaults, recorded as an empty
``XLA_FLAGS``: the pools cannot be read back)."""

from __future__ import annotations

import os
import sys
from typing import Any

from d5pipe.core.errors import D5PipeError

_PINNED: dict[str, int] = {}
"""``"xla"`` -> the threads d5pipe sized XLA's pools for in this process (set once, before its backend started)."""

RUN_APART = "run it in a process of its own (its own shard)"


class ThreadsFixed(D5PipeError):
    """A point asks for other threads than a framework fixed for this process: the point fails."""


def xla_flags(threads: int) -> str:
    """The ``XLA_FLAGS`` that size XLA's CPU pools for ``threads`` (one thread: no multi-threaded Eigen)."""
    eigen = "true" if threads > 1 else "false"
    return f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={threads}"


def _xla_started() -> bool:
    """Whether jax's backends have started (XLA read ``XLA_FLAGS`` then, once). jax has no public
    test of it; without its private one, an imported jax counts as started (flags set then might
    not apply, and the record would claim them)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:
        return True
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return True if started is None else bool(started())


def import_jax(threads: int) -> Any:
    """jax with XLA's CPU pools for ``threads``: set through ``XLA_FLAGS`` before its backend starts
    unless the environment sets it; :class:`ThreadsFixed` when d5pipe sized them for other threads."""
    if "xla" not in _PINNED and "XLA_FLAGS" not in os.environ and not _xla_started():
        os.environ["XLA_FLAGS"] = xla_flags(threads)
        _PINNED["xla"] = threads
    import jax

    fixed = _PINNED.get("xla")
    if fixed is not None and fixed != threads:
        raise ThreadsFixed(f"XLA's CPU threads are already fixed at {fixed} in this process (set for an earlier "
                           f"point); this point asks for {threads}: {RUN_APART}")
    return jax


def import_tensorflow(intra: int, inter: int) -> Any:
    """TensorFlow with its intra- and inter-op pools at ``intra`` and ``inter`` threads: set while its
    runtime has not started, kept when already so; :class:`ThreadsFixed` when fixed at others."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    threading = tf.config.threading
    try:  # setting the value a pool already has is no change: TensorFlow accepts it after its start
        threading.set_intra_op_parallelism_threads(intra)
        threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as err:  # its runtime started with other values (an earlier point, or 0: its default)
        got = threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads()
        raise ThreadsFixed(f"TensorFlow's threads are already fixed at {got[0]} intra-op, {got[1]} inter-op in "
                           f"this process (an earlier point; 0: TensorFlow's default, all cores); this point asks "
                           f"for {intra} intra-op, {inter} inter-op: {RUN_APART}") from err
    return tf
