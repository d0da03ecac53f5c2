"""``run_point`` for level 3: write the spec, launch the ranks, combine their results.

One point = one launch of ``distributed.ranks`` worker processes (torchrun / mpirun / srun, see
:mod:`d5pipe.levels.level3.launch`). Files of a point live under ``ctx.work_dir``:
``spec.json`` (what the workers read), ``launch.log`` (their stdout/stderr), ``ranks/rank<r>.json``.

For training points with ``distributed.serial_check`` the parent also trains the serial reference
(one process, whole global batches, rank 0's initial model; :func:`training.train_serial`) and
compares rank 0's final parameters with it: ``matches_serial`` passes when the largest absolute
difference is <= ``distributed.tolerance``. Floating-point sums in a different order are the only
expected difference, so this check is done only for set-ups without randomness in the step
(``model.dropout == 0``) and with ``train.deterministic``. Only an exact strategy (d5pipe.levels.level3.strategies,
``Strategy.exact``) gets the ``matches_serial`` verdict; a lossy one reports ``serial_max_abs_diff``
as its divergence. A strategy that does not declare the point's backend among its ``engines``
skips the point with the reason. A training point on a generated dataset (``synthetic_images``,
``synthetic_tokens``: never materialised, d5pipe.levels.lazy_samples) is skipped before any rank
starts: each rank moves its whole training split to its device.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from d5pipe.core.atomic import write_json
from d5pipe.core.canonical import digest
from d5pipe.core.fields import conf_from_dict, setting
from d5pipe.core.outcome import Metric, PointOutcome
from d5pipe.core.seeds import derive_seed
from d5pipe.core.stage_resources import merged_resources
from d5pipe.levels.contract import PointContext, PointSkipped, register_closer
from d5pipe.levels.dataset_key import is_lazy
from d5pipe.levels.declare import installed
from d5pipe.levels.level2.schema import TrainConf
from d5pipe.levels.level3 import early_stop, outcome, quality, training
from d5pipe.levels.level3.launch import LaunchPlan, build_launch
from d5pipe.levels.level3.schema import DistributedConf
from d5pipe.levels.level3.session import LAUNCH_ATTEMPTS, LaunchDied, RankSession, close_sessions, run_once, session_for
from d5pipe.levels.level3.shard_check import shard_metric
from d5pipe.levels.level3.validate import check_distributed
from d5pipe.levels.schema import ModelConf
from d5pipe.levels.targets import target_of
from d5pipe.levels.training_log import checked as mllog_checked
from d5pipe.levels.training_log import log_path, point_log
from d5pipe.levels.variant_seed import VariantKeys, variant_seed
from d5pipe.levels.verify import NO_DETECT, verdict
from d5pipe.measure.profile import enabled as profiling
from d5pipe.measure.profile import iterations as profile_iterations

if TYPE_CHECKING:
    from d5pipe.levels.datasets import Dataset


def _skip_if_unavailable(backend: str, device: str) -> None:
    if backend == "horovod" and not installed("horovod"):
        raise PointSkipped("horovod is not installed (scripts/install_horovod.sh VENV builds it)")
    if backend == "mpi" and not installed("mpi4py"):
        raise PointSkipped("mpi4py is not installed")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PointSkipped(f"train.device={device} but no CUDA device is available")


STRATEGY_KEYS: VariantKeys = {"distributed": (DistributedConf, ("strategy", "custom_strategies", "target_loss",
                                                                  "early_stop", "early_stop_patience",
                                                                  "early_stop_min_delta"))}
"""A strategy sweep's variants start from the same model and draw the same global batches
(d5pipe.levels.variant_seed); ``target_loss`` only reads the losses, early stopping only ends the run."""


def make_spec(ctx: PointContext, out_dir: Path) -> dict[str, Any]:
    """The JSON the workers read: everything they need, nothing interpolated into a command."""
    cfg = ctx.config
    dist_cfg = dataclasses.asdict(conf_from_dict(DistributedConf, "distributed", cfg["distributed"]))
    ranks = int(dist_cfg["ranks"])
    seed, how = variant_seed(ctx, STRATEGY_KEYS, "level3-training")
    spec: dict[str, Any] = {
        "experiment": ctx.experiment,
        "point_id": ctx.point_id,
        "backend": dist_cfg["backend"],
        "benchmark": dist_cfg["benchmark"],
        "ranks": ranks,
        "steps": int(dist_cfg["steps"]),
        "warmup_steps": int(dist_cfg["warmup_steps"]),
        "timeout_s": float(dist_cfg["timeout_s"]),
        "out_dir": str(out_dir),
        "rank_seeds": [derive_seed(seed, f"rank{r}") for r in range(ranks)],  # one seed per rank
        "device": str(setting(cfg.get("train"), TrainConf, "device")),
        "training_seed": {"seed": seed, "point_seed": ctx.seed, "how": how},
    }
    if spec["benchmark"] == "collective":
        spec.update(collective=dist_cfg["collective"], message_bytes=int(dist_cfg["message_bytes"]),
                    buffer=dist_cfg["buffer"])
    else:
        key, target = target_of(dist_cfg, "strategy")
        spec["strategy"] = {"key": key, "target": target, "name": str(dist_cfg["strategy"])}
        global_batch, per_rank = training.batch_sizes(dist_cfg, ranks)
        spec.update(
            scaling=dist_cfg["scaling"],
            global_batch=global_batch,
            per_rank_batch=per_rank,
            model=dict(cfg["model"]),
            train=dict(cfg["train"]),
            data_seed=derive_seed(seed, "data"),
            early_stop=early_stop.spec_of(dist_cfg),
        )
    return spec


def steps_run(rank_results: list[dict[str, Any]]) -> int:
    """The timed steps every rank ran (``distributed.early_stop`` may end them before ``steps``)."""
    counts = {int(r.get("steps_run", len(r["times_s"]))) for r in rank_results}
    if len(counts) != 1:
        raise RuntimeError(f"ranks stopped after different numbers of timed steps: {sorted(counts)}")
    return counts.pop()


def _read_ranks(out_dir: Path, ranks: int) -> list[dict[str, Any]]:
    missing = [r for r in range(ranks) if not (out_dir / f"rank{r}.json").exists()]
    if missing:
        raise RuntimeError(f"ranks {missing} wrote no result in {out_dir}")
    return [json.loads((out_dir / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(ranks)]


def serial_comparison(spec: dict[str, Any], data: Dataset, out_dir: Path, tolerance: float) -> dict[str, Any]:
    """Train the serial reference and compare rank 0's final parameters with it."""
    from d5pipe.levels.datasets import require_materialised

    x_train, y_train, _, _ = require_materialised(data, "level 3's serial reference")
    reference = training.train_serial(spec, x_train, y_train, data.input_shape, data.n_classes)
    rank0 = torch.load(out_dir / "params_rank0.pt")
    diff = float((rank0 - reference).abs().max()) if rank0.numel() else 0.0
    return {
        "max_abs_diff": diff,
        "verdict": verdict(diff, tolerance, NO_DETECT),
        "note": (
            f"matches_serial: rank 0's final parameters vs a 1-process run on the same global batches "
            f"from the same initial model; pass when max |diff| <= distributed.tolerance={tolerance}"
        ),
    }


def launch_options(ctx: PointContext) -> dict[str, Any]:
    """What :func:`build_launch` needs from a point: backend, ranks, launcher and the job's nodes.

    The nodes come from the stage's merged resources (``executor.resources.level3`` over
    ``default``), the same values the SLURM job was submitted with.
    """
    dist = conf_from_dict(DistributedConf, "distributed", ctx.config["distributed"])
    resources = merged_resources(ctx.executor, ctx.stage)
    return {
        "backend": str(dist.backend),
        "ranks": int(dist.ranks),
        "launcher": str(dist.launcher),
        "executor_name": str(ctx.executor.get("name") or "local"),
        "oversubscribe": bool(dist.oversubscribe),
        "threads_per_rank": int(dist.threads_per_rank or 0),
        "extra_args": list(dist.extra_args or []),
        "bind": str(dist.bind),
        # srun spreads the ranks over the point's nodes, else over the job's whole allocation
        "slurm_nodes": int(dist.nodes) if int(dist.nodes) > 1 else int(resources["nodes"]),
    }


def _skip_unsupported_strategy(dist_cfg: dict[str, Any]) -> None:
    """A strategy that cannot run the point (its engine, its roles on this many ranks) skips it, saying so."""
    key, target = target_of(dist_cfg, "strategy")
    strategy = training.build_strategy({"strategy": {"key": key, "target": target}})
    ranks = int(dist_cfg["ranks"])
    why = strategy.unsupported(str(dist_cfg["backend"]), ranks, training.batch_sizes(dist_cfg, ranks)[0])
    if why:
        raise PointSkipped(f"distributed.strategy {dist_cfg.get('strategy')!r}: {why}")


def _skip_generated_dataset(dataset_cfg: dict[str, Any]) -> None:
    if is_lazy(dataset_cfg):
        raise PointSkipped(f"level 3 training needs a materialised dataset; dataset.name="
                           f"{dataset_cfg.get('name')} is generated on demand (every rank loads its whole "
                           "training split onto its device)")


def run_point(ctx: PointContext) -> PointOutcome:
    """Level 3's ``run_point`` (see module docstring)."""
    cfg = ctx.config
    dist_cfg = dataclasses.asdict(conf_from_dict(DistributedConf, "distributed", cfg["distributed"]))
    check_distributed(dist_cfg)
    device = str(setting(cfg.get("train"), TrainConf, "device"))
    _skip_if_unavailable(str(dist_cfg["backend"]), device)
    if dist_cfg["benchmark"] == "train":
        _skip_unsupported_strategy(dist_cfg)
        _skip_generated_dataset(cfg.get("dataset") or {})
    work = Path(ctx.work_dir).resolve()  # the launcher runs with cwd=work
    out_dir = work / "ranks"
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*"):
        stale.unlink()
    spec = make_spec(ctx, out_dir)
    data_path: Path | None = None
    if spec["benchmark"] == "train":
        from d5pipe.levels.datasets import ensure

        data_path, _ = ensure(dict(cfg["dataset"]), Path(ctx.data_dir).resolve())
        spec["data_path"] = str(data_path)
        mllog = log_path(ctx)
        if mllog is not None:  # rank 0 writes it; this point adds the evaluation and run_stop
            spec["mllog"] = {"path": str(mllog.resolve()), "section": ctx.mlperf}
        if profiling(ctx.profile) and ctx.profile_dir is not None:
            traces = Path(ctx.profile_dir).resolve()  # the ranks run in a directory of their own
            traces.mkdir(parents=True, exist_ok=True)  # each rank profiles after its timed steps
            spec["profile"] = {"iterations": profile_iterations(ctx.profile),
                               "trace": str(traces / f"{ctx.point_id}.rank{{rank}}.train_step.trace.json")}
    options = launch_options(ctx)
    if options["executor_name"] != "slurm" and int(dist_cfg["nodes"]) > 1:
        raise PointSkipped(f"distributed.nodes={dist_cfg['nodes']} needs the slurm executor "
                           "(a local run has one node)")
    plan, rank_results, launch_s, retries = _run_ranks(ctx, spec, options, bool(dist_cfg["reuse_ranks"]))
    launch_info = _launch_info(plan, rank_results, bool(dist_cfg["reuse_ranks"]), retries, launch_s)
    hosts = launch_info["hosts"]
    if spec["benchmark"] == "collective":
        return outcome.collective_outcome(spec, rank_results, launch_info)
    from d5pipe.levels.datasets import load

    assert data_path is not None  # a training point always has its prepared dataset
    data = load(data_path)  # once: for the serial reference and for counting FLOPs
    serial = None
    deterministic = bool(setting(cfg["train"], TrainConf, "deterministic")) and \
        float(setting(cfg["model"], ModelConf, "dropout")) == 0.0
    ran = steps_run(rank_results)
    if dist_cfg["serial_check"] and deterministic:  # as many steps as the ranks ran
        serial = serial_comparison({**spec, "steps": ran}, data, out_dir, float(dist_cfg["tolerance"]))
        serial["exact"] = bool((rank_results[0].get("strategy") or {}).get("exact", True))
    result = outcome.train_outcome(spec, rank_results, launch_info, serial)
    workers = [r["rank"] for r in outcome.workers_of(rank_results)]
    result.metrics.append(shard_metric(out_dir, workers, len(data.y_train), int(spec["global_batch"])))
    tested = quality.test_metrics(spec, data, out_dir)
    result.metrics += tested
    result.extra["training_seed"] = spec["training_seed"]
    passes = [r["profile"] for r in rank_results if r.get("profile")]
    if passes:  # one profiled pass per rank (d5pipe.levels.level3.worker)
        result.extra["profile"] = passes
    target = setting(dist_cfg, DistributedConf, "target_loss")
    missed = False
    if target is not None:
        reached, note = quality.target_metrics(spec, rank_results, float(target))
        result.metrics += reached
        if note:  # the target never reached
            result.extra.setdefault("notes", []).append(note)
            missed = True
    _finish_log(ctx, spec, result, tested, ran, target, missed)
    peak = bool(setting(cfg["train"], TrainConf, "peak"))
    add_flop_metrics(result, spec, data, ctx.cache if peak else None, len(hosts) or 1)
    return result


def _finish_log(ctx: PointContext, spec: dict[str, Any], result: PointOutcome, tested: list[Metric], ran: int,
                target: float | None, missed: bool) -> None:
    """Rank 0's MLPerf log: this point's evaluation of rank 0's model and ``run_stop`` (``aborted``
    when ``distributed.target_loss`` was never reached), then the compliance check."""
    if "mllog" not in spec:
        return
    mllog = point_log(ctx, append=True)
    accuracy = next(float(m.value) for m in tested if m.name == "test_accuracy" and m.value is not None)
    mllog.evaluation(accuracy, samples_count=(int(spec["warmup_steps"]) + ran) * int(spec["global_batch"]))
    mllog.stop(target, not missed)
    metrics, extra = mllog_checked(ctx, mllog, int(spec["training_seed"]["seed"]), int(spec["global_batch"]))
    result.metrics += metrics
    result.extra.update(extra)


def shared_host(rank_results: list[dict[str, Any]]) -> str:
    """Why the ranks' nodes are not separate machines ("" when they are, or on one node): the
    nodes report one kernel boot ID, and the CPU sets of ranks on different nodes overlap."""
    hosts = {str(r["hostname"]) for r in rank_results}
    boots = {str(r.get("boot_id") or "") for r in rank_results} - {""}
    if len(hosts) < 2 or len(boots) != 1:
        return ""
    cpus: dict[str, set[int]] = {}
    for r in rank_results:
        cpus.setdefault(str(r["hostname"]), set()).update(int(c) for c in r.get("cpus") or [])
    sets = list(cpus.values())
    overlap = any(a & b for i, a in enumerate(sets) for b in sets[i + 1:])
    return (f"the {len(hosts)} nodes report one kernel boot ID" +
            (" and their ranks' CPU sets overlap" if overlap else "") + ": they share one host")


def ranks_share_cpus(rank_results: list[dict[str, Any]]) -> bool:
    """Whether two ranks on one host ran on overlapping CPU sets (unbound or oversubscribed ranks do)."""
    seen: dict[str, set[int]] = {}
    for r in rank_results:
        cpus = {int(c) for c in r.get("cpus") or []}
        host = seen.setdefault(str(r.get("hostname", "")), set())
        if host & cpus:
            return True
        host |= cpus
    return False


def _launch_info(plan: LaunchPlan, rank_results: list[dict[str, Any]], reused: bool, retries: list[str],
                 launch_s: float) -> dict[str, Any]:
    """How the point's ranks were launched and placed (the record's ``launch``)."""
    hosts = sorted({str(r["hostname"]) for r in rank_results})
    return {
        "launcher": plan.launcher,
        "argv": plan.argv,
        "env": {k: v for k, v in plan.env.items() if k != "PATH"},
        "oversubscribed": plan.oversubscribed,
        "threads_per_rank": plan.threads_per_rank,
        "binding": plan.binding,
        "rank_cpus": {str(r.get("rank", i)): list(r.get("cpus") or []) for i, r in enumerate(rank_results)},
        "ranks_share_cpus": ranks_share_cpus(rank_results),
        "polling_threads": {str(r.get("rank", i)): list(r.get("polling_threads") or []) for i, r in enumerate(rank_results)},
        "hosts": hosts,
        "ranks_per_host": dict(Counter(str(r["hostname"]) for r in rank_results)),
        "shared_host": shared_host(rank_results),
        "ranks_reused": reused,
        "launch_retries": retries,
        "launch_s": launch_s,
        "rank_wall_s": max(float(r.get("wall_s", 0.0)) for r in rank_results),
    }


def _run_ranks(ctx: PointContext, spec: dict[str, Any], options: dict[str, Any], reuse: bool
               ) -> tuple[LaunchPlan, list[dict[str, Any]], float, list[str]]:
    """Run ``spec`` on its ranks: in the run's rank session for these launch options (``reuse``;
    a launch that died before its first point is retried) or in a launch of its own. Returns the
    launch plan, each rank's result, the launch time this point waited for and the retries."""
    work = Path(ctx.work_dir).resolve()
    out_dir = Path(spec["out_dir"])
    timeout_s = float(spec["timeout_s"])
    retries: list[str] = []
    if not reuse:
        plan = build_launch(spec_path=work / "spec.json", **options)
        spec["threads_per_rank"] = plan.threads_per_rank
        write_json(work / "spec.json", spec)
        run_once(plan, work, work / "launch.log", timeout_s)
        # one launch per point: its launch is not told apart from the point's own time
        return plan, _read_ranks(out_dir, int(spec["ranks"])), 0.0, retries
    key = digest({**options, "device": spec["device"], "timeout_s": timeout_s}, 12)
    root = Path(ctx.run_dir).resolve() / "work" / ctx.stage / "_sessions" / key

    def make() -> RankSession:
        plan = build_launch(spec_path=root, worker_args=["--session", str(root)], **options)
        return RankSession(plan, root, int(spec["ranks"]))

    register_closer(ctx.cache, close_sessions)
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        session = session_for(ctx.cache, key, make)  # a new launch when the last one died
        spec["threads_per_rank"] = session.plan.threads_per_rank
        write_json(work / "spec.json", spec)
        launched = session.next_index == 0  # this point waits for the ranks to come up
        try:
            rank_results = session.run(spec, out_dir, timeout_s)
            return session.plan, rank_results, (session.launch_s or 0.0) if launched else 0.0, retries
        except LaunchDied as exc:
            if attempt == LAUNCH_ATTEMPTS:
                raise
            retries.append(f"launch {attempt} died before the first point: {str(exc).splitlines()[0]}")
    raise AssertionError("unreachable: the last attempt returns or raises")


def add_flop_metrics(out: PointOutcome, spec: dict[str, Any], data: Dataset, cache: dict[str, Any] | None,
                     nodes: int) -> None:
    """``flops_per_sample`` of one training step (counted on rank 0's model in this process),
    ``gflops`` of all ranks together at the global ``samples_per_s`` and, when ``cache`` is given,
    ``pct_peak_flops`` against the measured matmul peak of one node times the ``nodes`` used."""
    from d5pipe.measure.flops import FLOPS_NOTE, flop_metrics, safe_count, training_step_flops
    from d5pipe.measure.peak import Peak, flops_peak

    model = training.build_model(spec["model"], data.input_shape, data.n_classes, int(spec["rank_seeds"][0]))
    n = min(int(spec["per_rank_batch"]), len(data.y_train))
    warnings: list[str] = out.extra.setdefault("warnings", [])
    counted = safe_count(lambda: training_step_flops(model, data.x_train[:n], data.y_train[:n]), warnings)
    if counted is None:
        return
    device = str(spec["device"])
    node_peak = None if cache is None else flops_peak(cache, "cuda" if device.startswith("cuda") else "cpu",
                                                      torch.float32)
    peak = None if node_peak is None else Peak(node_peak.best * nodes, node_peak.median * nodes, node_peak.work,
                                               f"{node_peak.what} x {nodes} node(s)")
    throughput = next(m for m in out.metrics if m.name == "samples_per_s")
    out.metrics += flop_metrics("", counted / n, throughput, peak)
    out.extra["flops"] = FLOPS_NOTE + "; peak: one node's measured matmul rate times the nodes used"
