"""A distributed point's metrics: what each name means (:data:`DISTRIBUTED_METRICS`, the level's
``Level.metrics``; docs/reference/metrics.md and the report read it), the per-rank split's names
(:data:`RANK_SPLIT`, a pattern) and :func:`metric`, which builds a metric as declared. Torch-free."""

from __future__ import annotations

from functools import partial

from d5pipe.core.outcome import Declared, declared_metric
from d5pipe.measure.energy import JOULES, WATTS
from d5pipe.measure.flops import flop_declared
from d5pipe.measure.mllog_check import DECLARED as MLLOG_DECLARED
from d5pipe.measure.stats import timing_declared

PARTS = ("compute", "comm", "wait")
"""Where a rank's time per step goes (d5pipe.levels.level3.rank_split)."""
RANK_SPLIT = f"<{'/'.join(PARTS)}>_s_per_step_rank<N>"
"""The per-rank split's metric names: a part of :data:`PARTS` and the rank (d5pipe.core.outcome.name_regex)."""
STEP_SAMPLES = "step_time_max_s"
"""A training point's raw samples: each timed step's slowest rank."""

ENERGY_ABOUT = ("energy of the timed steps per step, summed over the hosts: RAPL counts a whole host (its sockets "
                "and DRAM, every rank on it and other processes too), so it is read once per host, by the host's "
                "local rank 0 around its timed steps; on CUDA each rank reads its own GPU (NVML), summed over ranks")
"""What level 3's ``energy_per_step`` and ``power`` (the measuring ranks' average powers, summed) mean."""

_LAUNCH = {
    "oversubscribed": Declared("", "info", None, "ranks x threads_per_rank above the node's cores (not under srun)"),
    "threads_per_rank": Declared("", "info", None, "intra-op threads each rank was given"),
    "bind": Declared("", "info", None, "how the ranks were bound to CPUs (placement), or none"),
    "ranks_share_cpus": Declared("", "info", None, "whether two ranks on one host ran on overlapping CPU sets"),
    "nodes": Declared("", "info", None, "hosts the ranks ran on"),
    "shared_host": Declared("", "info", None, "whether the nodes are one machine (they report one kernel boot ID)"),
    "ranks_per_node": Declared("", "info", None, "the most ranks on one host"),
}

_COLLECTIVE = {
    **timing_declared("collective_time_s", "s", "iter_time_max_s", "distributed.benchmark=collective: one call, "
                      "the slowest rank's, median [95% CI]", "coll_"),
    "algbw_GBps": Declared("GB/s", "timing", "iter_time_max_s", "message bytes over collective_time_s"),
    "busbw_GBps": Declared("GB/s", "timing", "iter_time_max_s", "algbw x busbw_factor (nccl-tests' bus bandwidth)"),
    "message_bytes": Declared("B", "deterministic", None, "the message (an allgather: the gathered bytes)"),
    "busbw_factor": Declared("", "deterministic", None, "allreduce 2(n-1)/n, allgather (n-1)/n, broadcast 1"),
    "collective_correct": Declared("", "verdict", None, "every rank received what the collective should give"),
    "buffer": Declared("", "info", None, "where the timed buffer lives (placement)"),
    "buffer_allocator": Declared("", "info", None, "what allocated it"),
    "buffer_huge_page_bytes": Declared("B", "info", None, "its bytes on huge pages (the least over ranks)"),
}

_TRAINING = {
    **timing_declared("time_per_step_s", "s", STEP_SAMPLES, "a training step, the slowest rank's: median [95% CI]",
                      "step_"),
    "samples_per_s": Declared("samples/s", "timing", STEP_SAMPLES, "global batch over time_per_step_s"),
    "global_batch": Declared("", "deterministic", None, "samples per step over all ranks"),
    "per_rank_batch": Declared("", "deterministic", None, "rank 0's share of the global batch"),
    "strategy": Declared("", "info", None, "distributed.strategy"),
    "gradient_bytes": Declared("B", "deterministic", None, "the model's gradient"),
    "comm_payload_bytes_per_rank_step": Declared("B", "count", None, "bytes a rank hands to the counted collectives "
                                                 "per step (mean over ranks); the record's note says what is counted"),
    "comm_expected_payload_bytes_per_rank_step": Declared("B", "deterministic", None,
                                                          "the strategy's analytic expectation of that payload"),
    "comm_payload_vs_expected": Declared("", "numerical", None, "payload / its expectation"),
    "comm_payload_vs_gradient": Declared("", "numerical", None, "payload / gradient_bytes"),
    "comm_ring_expected_bytes": Declared("B", "deterministic", None, "2(n-1)/n x gradient_bytes"),
    "comm_bytes_per_rank_step": Declared("B", "count", None, "allreduce only: the ring's wire volume of the payload, "
                                         "2(n-1)/n x payload"),
    "comm_calls_per_step": Declared("", "count", None, "collective calls per step (mean over ranks)"),
    "params_identical": Declared("", "verdict", None, "every worker ends with the same parameters"),
    "replicas_identical": Declared("", "info", None, "the same, for a strategy whose replicas differ by design"),
    "final_loss": Declared("", "numerical", None, "the last step's loss, mean over the workers"),
    "steps_run": Declared("steps", "count", None, "timed steps run: fewer than distributed.steps when "
                          "distributed.early_stop ended the run (why: the record's extra.stopped)"),
    "energy_per_step": Declared(JOULES, "info", None, ENERGY_ABOUT),
    **MLLOG_DECLARED,
    "power": Declared(WATTS, "info", None, "the measuring ranks' average powers over the timed steps, summed"),
    "time_per_step_<role>_s": Declared("s", "timing", "step_time_max_<role>_s", "ranks of several roles (a parameter "
                                       "server): the step time of the role's slowest rank, median [95% CI]"),
    "ranks_<role>": Declared("", "deterministic", None, "ranks of that role"),
    "comm_payload_bytes_per_step_<role>": Declared("B", "count", None, "payload per rank and step of that role"),
    "comm_expected_payload_bytes_per_step_<role>": Declared("B", "deterministic", None, "its analytic expectation"),
    "comm_payload_vs_expected_<role>": Declared("", "numerical", None, "their ratio"),
    "staleness_max": Declared("", "count", None, "an asynchronous strategy: the most rounds an applied gradient "
                              "was behind the synchronous schedule"),
    "staleness_mean": Declared("", "numerical", None, "the mean of that staleness"),
    "staleness_bounded": Declared("", "verdict", None, "staleness_max within the strategy's bound"),
    RANK_SPLIT: Declared("s", "info", None, "mean s per timed step of rank N: compute (outside the collectives "
                         "d5pipe counts), comm (the least time any rank spent inside the step's collectives), wait "
                         "(the rest inside them and at the lockstep barrier); lockstep strategies only"),
    "straggler": Declared("", "info", None, "the worker the others wait for (rank N), or none (the rule: the "
                          "record's note)"),
    "compute_imbalance": Declared("", "info", None, "the largest median compute of a worker over the other "
                                  "workers' median"),
    "serial_max_abs_diff": Declared("", "numerical", None, "the largest parameter difference from one process "
                                    "trained on the same global batches"),
    "matches_serial": Declared("", "verdict", None, "that difference within distributed.tolerance (exact strategies)"),
    "rank_samples_disjoint": Declared("", "verdict", None, "the workers' samples of a step are disjoint and an "
                                      "epoch draws each sample at most once"),
    "test_loss": Declared("", "numerical", None, "rank 0's final model on the test split: mean loss"),
    "test_accuracy": Declared("", "numerical", None, "rank 0's final model on the test split: accuracy"),
    "steps_to_target_loss": Declared("steps", "numerical", None, "distributed.target_loss: the first timed step "
                                     "whose mean loss over the workers reaches it (NaN: never)"),
    "time_to_target_loss_s": Declared("s", "timing", STEP_SAMPLES, "the step times up to and including it"),
    **flop_declared("", "samples_per_s", STEP_SAMPLES),
    "speedup": Declared("", "timing", None, "derived by the level: against the 1-rank point of the same "
                        "configuration (distributed.scaling: strong or weak), CI from both times' CIs"),
    "efficiency": Declared("", "timing", None, "speedup / ranks"),
}

DISTRIBUTED_METRICS: dict[str, Declared] = {**_COLLECTIVE, **_TRAINING, **_LAUNCH}
"""Every metric name of a distributed point (a collective's or a training's) and its one meaning."""


metric = partial(declared_metric, DISTRIBUTED_METRICS)
"""``metric(name, value, kind=None, ci=None, detail=None)``: ``name``'s Metric as :data:`DISTRIBUTED_METRICS`
declares it."""
