"""Turn the rank workers' JSON files into a point's metrics.

How ranks are combined (recorded in ``extra["notes"]`` of every record): each iteration starts after
a barrier; each rank times its own call with ``perf_counter``; the iteration's time is the **max over
ranks**; median and order-statistic CI (d5pipe.measure.stats) are computed on those maxima, which are kept
as the raw samples.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.levels.level3.collectives import actual_message_bytes, busbw_factor
from d5pipe.levels.level3.metrics import DISTRIBUTED_METRICS, ENERGY_ABOUT, STEP_SAMPLES, metric
from d5pipe.levels.level3.rank_split import split_metrics
from d5pipe.levels.level3.scaling import ring_allreduce_bytes
from d5pipe.levels.verify import passed
from d5pipe.measure.stats import rate_metric, summarize

TIMING_NOTE = (
    "per-iteration time = max over ranks of each rank's perf_counter time for the iteration, "
    "every iteration starting after a barrier; median and 95% order-statistic CI on these maxima"
)
COMM_NOTE = (
    "comm_payload_bytes_per_rank_step counts the bytes each rank hands to gradient allreduce calls "
    "per step (DDP: comm-hook bucket sizes; Horovod: gradients passed to allreduce_async_; mpi: "
    "the flat gradient buffer). comm_bytes_per_rank_step is the ring-allreduce wire volume of that "
    "payload, 2(n-1)/n x payload; comm_ring_expected_bytes is 2(n-1)/n x the model's gradient "
    "bytes. Parameter broadcast at set-up is excluded. With another distributed.strategy the payload is "
    "what the strategy hands to the Communicator per step (allgather/allreduce inputs, point-to-point "
    "sends once per peer) and comm_expected_payload_bytes_per_rank_step its own analytic expectation; "
    "comm_bytes_per_rank_step (the ring allreduce's wire volume) is then not reported."
)


ASYNC_TIMING_NOTE = (
    "asynchronous strategy: ranks do not wait for each other between steps; per-iteration time = max over "
    "ranks of each rank's perf_counter time for its i-th step (which includes its waits for messages)"
)


def energy_of(ranks: list[dict[str, Any]], steps: int, out: PointOutcome) -> None:
    """``energy_per_step`` and ``power`` from the ranks that measured (:data:`ENERGY_ABOUT`), their
    records in ``extra.energy``; where a measuring rank could read nothing, no metric and the reason."""
    records = {int(r["rank"]): r["energy"] for r in ranks if r.get("energy")}
    if not records:
        return
    unavailable = [rec for rec in records.values() if not rec.get("available")]
    if unavailable:
        out.extra["energy"] = {"available": False, "reason": str(unavailable[0]["reason"]),
                               "measured_by": sorted(records)}
        return
    joules = sum(float(rec["joules"]) for rec in records.values())
    watts = [float(rec["watts"]) for rec in records.values() if rec.get("watts") is not None]
    first = next(iter(records.values()))
    out.extra["energy"] = {"available": True, "method": first["method"], "joules": joules, "steps": steps,
                           "measured_by": sorted(records), "per_rank": {str(k): v for k, v in records.items()},
                           "what": ENERGY_ABOUT}
    if steps:
        out.metrics.append(metric("energy_per_step", joules / steps, detail=ENERGY_ABOUT))
    if len(watts) == len(records):
        out.metrics.append(metric("power", sum(watts), detail=ENERGY_ABOUT))


def role_of(rank: dict[str, Any]) -> str:
    """A rank's role (d5pipe.levels.level3.strategies.Strategy.role; results without one: ``worker``)."""
    return str(rank.get("role", "worker"))


def workers_of(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks that train and hold the model (a parameter server's servers do neither)."""
    return [r for r in ranks if role_of(r) == "worker"]


def role_metrics(ranks: list[dict[str, Any]], strategy: dict[str, Any], samples: dict[str, list[float]]
                 ) -> list[Metric]:
    """Where ranks play several roles (a parameter server's workers and servers): per role, the time
    per step (max over the role's ranks, median and CI) and the payload bytes per rank and step, with
    the strategy's analytic expectation for one rank of that role."""
    roles = sorted({role_of(r) for r in ranks})
    if len(roles) < 2:
        return []
    expected = strategy.get("expected_role_bytes_per_step") or {}
    found: list[Metric] = []
    for role in roles:
        mine = [r for r in ranks if role_of(r) == role]
        key = f"step_time_max_{role}_s"
        samples[key] = max_over_ranks([r["times_s"] for r in mine])
        summary = summarize(samples[key])
        payload = float(np.mean([r["comm_bytes_per_step"] for r in mine]))
        analytic = float(expected.get(role, float("nan")))
        found += [metric(f"time_per_step_{role}_s", summary.median, ci=(summary.ci_low, summary.ci_high)),
                  metric(f"ranks_{role}", len(mine)),
                  metric(f"comm_payload_bytes_per_step_{role}", payload),
                  metric(f"comm_expected_payload_bytes_per_step_{role}", analytic),
                  metric(f"comm_payload_vs_expected_{role}", payload / analytic if analytic else float("nan"))]
    return found


def staleness_metrics(ranks: list[dict[str, Any]], extra: dict[str, Any]) -> list[Metric]:
    """An asynchronous strategy's observed staleness (every applied gradient's, over all ranks that
    record it): its maximum and mean, the histogram in the record, and ``staleness_bounded`` (max <=
    the strategy's bound) as a verdict."""
    seen = [r["observed"] for r in ranks if (r.get("observed") or {}).get("staleness") is not None]
    if not seen:
        return []
    values = [int(v) for o in seen for v in o["staleness"]]
    bound = max(int(o["staleness_bound"]) for o in seen)
    extra["staleness_histogram"] = {str(k): c for k, c in sorted(Counter(values).items())}
    worst = max(values, default=0)
    detail = (f"{len(values)} gradients applied; staleness (rounds behind the synchronous schedule) "
              f"max {worst}, bound {bound}; histogram {extra['staleness_histogram']}")
    return [metric("staleness_max", worst),
            metric("staleness_mean", float(np.mean(values)) if values else 0.0),
            metric("staleness_bounded", passed(worst <= bound), detail=detail)]


def max_over_ranks(per_rank: list[list[float]]) -> list[float]:
    """Per-iteration maximum over ranks (all ranks must report the same number of iterations)."""
    lengths = {len(t) for t in per_rank}
    if len(lengths) != 1:
        raise RuntimeError(f"ranks reported different iteration counts: {sorted(lengths)}")
    return [float(v) for v in np.max(np.asarray(per_rank, dtype=np.float64), axis=0)]


def _common(outcome: PointOutcome, launch: dict[str, Any]) -> None:
    hosts = list(launch.get("hosts") or [])
    per_host = launch.get("ranks_per_host") or {}
    outcome.metrics += [metric("oversubscribed", bool(launch["oversubscribed"])),
                        metric("threads_per_rank", int(launch["threads_per_rank"])),
                        # how the ranks were placed (d5pipe.levels.level3.placement) and whether they shared CPUs
                        metric("bind", str(launch.get("binding") or "none").split(" ")[0]),
                        metric("ranks_share_cpus", bool(launch.get("ranks_share_cpus"))),
                        metric("nodes", len(hosts)),
                        metric("shared_host", bool(launch.get("shared_host")))]
    if per_host:
        outcome.metrics.append(metric("ranks_per_node", max(per_host.values())))
    outcome.extra.update(nodelist=hosts, launch=launch)


def collective_outcome(spec: dict[str, Any], ranks: list[dict[str, Any]], launch: dict[str, Any]) -> PointOutcome:
    """Metrics of a collective benchmark point."""
    n = int(spec["ranks"])
    collective = str(spec["collective"])
    times = max_over_ranks([r["times_s"] for r in ranks])
    summary = summarize(times)
    size = actual_message_bytes(collective, int(spec["message_bytes"]), n)
    key = "iter_time_max_s"
    out = PointOutcome(samples={key: times})
    factor = busbw_factor(collective, n)
    correct = all(bool(r["correct"]) for r in ranks)
    out.metrics += [*summary.to_metrics("collective_time_s", "s", key, prefix="coll_"),
                    *(rate_metric(name, work / 1e9, summary, DISTRIBUTED_METRICS[name].unit, key)
                      for name, work in (("algbw_GBps", size), ("busbw_GBps", size * factor))),
                    metric("message_bytes", size),
                    metric("busbw_factor", factor),
                    metric("collective_correct", passed(correct))]
    allocations = [r.get("allocation") or {} for r in ranks]
    if allocations[0]:  # the buffer timed (d5pipe.levels.level3.placement.allocate)
        huge = [int(h) for h in (a.get("huge_page_bytes") for a in allocations) if h is not None]
        out.metrics += [metric("buffer", str(allocations[0]["buffer"])),
                        metric("buffer_allocator", str(allocations[0]["allocator"]))]
        if len(huge) == len(allocations):  # every rank could read its smaps
            out.metrics.append(metric("buffer_huge_page_bytes", min(huge)))
        out.extra["allocation"] = allocations
    _common(out, launch)
    out.extra.update(notes=[TIMING_NOTE, "algbw = message bytes / time; busbw = algbw x nccl-tests factor "
                            "(allreduce 2(n-1)/n, allgather (n-1)/n, broadcast 1); allgather size = gathered bytes"],
                     warnings=list(summary.warnings), per_rank_median_s=[float(np.median(r["times_s"])) for r in ranks])
    return out


def _payload_per_step(ranks: list[dict[str, Any]]) -> tuple[float, bool]:
    """Mean payload bytes per rank and step (arithmetic mean: a cost), and whether it was constant."""
    values = np.asarray([r["comm_bytes_per_step"] for r in ranks], dtype=np.float64)
    if values.size == 0:
        return 0.0, True
    return float(values.mean()), bool(np.all(values == values.flat[0]))


def train_outcome(
    spec: dict[str, Any],
    ranks: list[dict[str, Any]],
    launch: dict[str, Any],
    serial: dict[str, Any] | None,
) -> PointOutcome:
    """Metrics of a data-parallel training point; ``serial`` is the reference comparison or None."""
    n = int(spec["ranks"])
    times = max_over_ranks([r["times_s"] for r in ranks])
    summary = summarize(times)
    key = STEP_SAMPLES
    out = PointOutcome(samples={key: times})
    out.metrics += [*summary.to_metrics("time_per_step_s", "s", key, prefix="step_"),
                    rate_metric("samples_per_s", float(spec["global_batch"]), summary,
                                DISTRIBUTED_METRICS["samples_per_s"].unit, key),
                    metric("global_batch", int(spec["global_batch"])),
                    # rank 0 is a worker: its share
                    metric("per_rank_batch", int(ranks[0].get("per_rank_batch", spec["per_rank_batch"])))]

    grad_bytes = int(ranks[0]["gradient_bytes"])
    payload, constant = _payload_per_step(ranks)
    expected = ring_allreduce_bytes(grad_bytes, n)
    calls = float(np.mean([np.mean(r["comm_calls_per_step"]) for r in ranks]))
    strategy = ranks[0].get("strategy") or {"name": "allreduce", "exact": True, "consistent": True,
                                              "expected_bytes_per_step": float(grad_bytes)}
    analytic = float(strategy["expected_bytes_per_step"])
    out.metrics += [
        metric("strategy", str(strategy["name"])),
        metric("comm_expected_payload_bytes_per_rank_step", analytic),
        metric("comm_payload_vs_expected", payload / analytic if analytic else float("nan")),
        metric("gradient_bytes", grad_bytes),
        metric("comm_payload_bytes_per_rank_step", payload),
        metric("comm_ring_expected_bytes", expected),
        metric("comm_payload_vs_gradient", payload / grad_bytes if grad_bytes else float("nan")),
        metric("comm_calls_per_step", calls),
    ]
    if strategy["name"] == "allreduce":  # the ring formula holds for an allreduce only
        out.metrics.append(metric("comm_bytes_per_rank_step", ring_allreduce_bytes(payload, n)))
    workers = workers_of(ranks)
    hashes = {r["params_sha256"] for r in workers}
    if strategy.get("consistent", True):
        out.metrics.append(metric("params_identical", passed(len(hashes) == 1)))
    else:  # replicas differ between synchronisations by design
        out.metrics.append(metric("replicas_identical", len(hashes) == 1))
    out.metrics.append(metric("final_loss", float(np.mean([r["losses"][-1] for r in workers]))))
    # timed steps run: fewer than distributed.steps when distributed.early_stop ended the run (why: extra.stopped)
    out.metrics.append(metric("steps_run", len(times)))
    energy_of(ranks, len(times), out)
    notes = [TIMING_NOTE if strategy.get("lockstep", True) else ASYNC_TIMING_NOTE, COMM_NOTE]
    out.metrics += role_metrics(ranks, strategy, out.samples)
    out.metrics += staleness_metrics(ranks, out.extra)
    split, split_note = split_metrics(ranks, bool(strategy.get("lockstep", True)))
    out.metrics += split
    notes.append(split_note)
    if not constant:
        notes.append("comm payload varied between steps or ranks; the mean is reported")
    if spec["backend"] == "horovod" and n == 1:
        notes.append("Horovod skips gradient allreduce on a single rank: payload 0 is expected")
    if serial is not None:
        out.metrics.append(metric("serial_max_abs_diff", serial["max_abs_diff"]))
        if serial.get("exact", True):
            out.metrics.append(metric("matches_serial", serial["verdict"]))
            notes.append(serial["note"])
        else:
            notes.append(f"strategy {strategy['name']!r} is lossy: serial_max_abs_diff is its divergence from the "
                         "1-process model on the same global batches (reported, not a check)")
    _common(out, launch)
    out.extra.update(notes=notes, warnings=list(summary.warnings), params_sha256=sorted(hashes),
                     losses_rank0=ranks[0]["losses"], n_params=int(ranks[0]["n_params"]))
    if "stopped" in ranks[0]:  # d5pipe.levels.level3.early_stop: why the ranks stopped, the same on each
        out.extra["stopped"] = ranks[0]["stopped"]
    return out
