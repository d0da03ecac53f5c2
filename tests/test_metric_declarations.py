"""Every metric name a point reports is declared once, in its level's list (``Level.metrics``,
d5pipe.core.outcome.Declared), and the rows the results pass adds in
d5pipe.results.run_results.RESULT_ROWS: docs/reference/metrics.md and the report's glossaries read
them. A real run's names are checked against them by tests/test_reproduce_e2e.py (the quickstart,
all four levels) through :func:`undeclared`, a real point's by the level's own tests through
:func:`emitted_undeclared`; here, the lists themselves and level 3's outcomes."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

import pandas as pd

from d5pipe.core.outcome import (
    PLACEHOLDER,
    Declarations,
    Metric,
    MetricKind,
    declared_metric,
    fill,
    lookup,
    name_regex,
)
from d5pipe.levels.level3.metrics import DISTRIBUTED_METRICS, RANK_SPLIT
from d5pipe.levels.level3.outcome import collective_outcome, train_outcome
from d5pipe.levels.level3.rank_split import RANK_METRIC, rank_metric
from d5pipe.levels.registry import LEVELS, STAGES
from d5pipe.results.run_results import RESULT_ROWS

KINDS = typing.get_args(MetricKind)


def undeclared(df: pd.DataFrame) -> list[str]:
    """``stage/metric`` of each row of a results frame whose name neither its level nor the results
    pass declares, or whose unit is not its level's declaration's."""
    bad = set()
    for (stage, name, unit), _ in df.groupby(["stage", "metric", "unit"], dropna=False):
        own = lookup(STAGES[str(stage)].metrics, str(name))
        if own is None and lookup(RESULT_ROWS, str(name)) is None:
            bad.add(f"{stage}/{name}: not declared")
        elif own is not None and own[1].unit != (unit if isinstance(unit, str) else ""):
            bad.add(f"{stage}/{name}: unit {unit!r}, declared {own[1].unit!r}")
    return sorted(bad)


def emitted_undeclared(stage: str, metrics: Iterable[Metric]) -> list[str]:
    """:func:`undeclared` of the metrics a point of ``stage`` returned."""
    found = list(metrics)
    return undeclared(pd.DataFrame({"stage": stage, "metric": [m.name for m in found],
                                    "unit": [m.unit for m in found]}))


def _well_formed(declared: Declarations) -> None:
    assert declared
    for name, d in declared.items():
        assert isinstance(d.unit, str) and d.kind in KINDS and d.about.strip(), name
        assert d.samples is None or isinstance(d.samples, str), name
        example = fill(name, *(0 if p == "N" else p.split("/")[0] for p in PLACEHOLDER.findall(name)))
        assert "<" not in example and name_regex(name).fullmatch(example), name
        assert lookup(declared, example) is not None, name


def test_every_level_declares_its_metrics_well_formed() -> None:
    for level in LEVELS:
        _well_formed(level.metrics)
    _well_formed(RESULT_ROWS)


def test_a_pattern_stands_for_the_names_it_declares_and_no_others() -> None:
    assert RANK_METRIC is name_regex(RANK_SPLIT)  # the per-rank names' regex, in one place
    match = RANK_METRIC.fullmatch(rank_metric("wait", 12))
    assert match is not None and match.groups() == ("wait", "12")
    assert lookup(DISTRIBUTED_METRICS, "comm_s_per_step_rank3") == (RANK_SPLIT, DISTRIBUTED_METRICS[RANK_SPLIT])
    assert lookup(DISTRIBUTED_METRICS, "disk_s_per_step_rank3") is None
    assert lookup(DISTRIBUTED_METRICS, "compute_s_per_step_rankX") is None
    # a pattern's raw samples are the name's own
    m = declared_metric(DISTRIBUTED_METRICS, "time_per_step_server_s", 0.1, ci=(0.09, 0.11))
    assert (m.unit, m.kind, m.samples, m.ci_low) == ("s", "timing", "step_time_max_server_s", 0.09)


def _rank(rank: int, role: str) -> dict[str, Any]:
    steps = 4
    return {"rank": rank, "role": role, "hostname": "h", "times_s": [0.01 * (rank + 1)] * steps,
            "collective_s": [0.002] * steps, "barrier_s": [0.001] * steps, "gradient_bytes": 400,
            "comm_bytes_per_step": 400, "comm_calls_per_step": [1] * steps, "params_sha256": "a",
            "losses": [1.0] * steps, "n_params": 100, "per_rank_batch": 8,
            "observed": {"staleness": [0, 1], "staleness_bound": 2},
            "energy": {"available": True, "joules": 1.0, "watts": 2.0, "method": "rapl"},
            "strategy": {"name": "parameter_server", "exact": True, "consistent": True, "lockstep": True,
                         "expected_bytes_per_step": 400.0, "expected_role_bytes_per_step": {"worker": 400.0}}}


def test_level3_outcomes_report_only_declared_names_and_units() -> None:
    launch = {"oversubscribed": False, "threads_per_rank": 1, "binding": "core", "ranks_share_cpus": False,
              "hosts": ["h"], "ranks_per_host": {"h": 3}, "shared_host": ""}
    spec = {"ranks": 3, "global_batch": 16, "per_rank_batch": 8, "backend": "mpi"}
    ranks = [_rank(0, "worker"), _rank(1, "worker"), _rank(2, "server")]
    serial = {"max_abs_diff": 0.0, "verdict": "pass", "note": "", "exact": True}
    collective = [{"rank": r, "hostname": "h", "times_s": [1e-3, 2e-3], "correct": True,
                   "allocation": {"buffer": "peer", "allocator": "numpy.ones", "huge_page_bytes": 0}} for r in (0, 1)]
    metrics = [*train_outcome(spec, ranks, launch, serial).metrics,
               *collective_outcome({"ranks": 2, "collective": "allreduce", "message_bytes": 4096}, collective,
                                   launch).metrics]
    names = {m.name for m in metrics}
    assert {"time_per_step_server_s", "staleness_bounded", "energy_per_step", "buffer", rank_metric("comm", 2)} <= names
    assert emitted_undeclared(STAGES["level3"].name, metrics) == []
    assert emitted_undeclared(STAGES["level3"].name, [Metric("final_loss", 0.0, "ms")]) != []  # its unit is ""
