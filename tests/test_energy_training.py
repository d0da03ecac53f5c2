"""Energy per training step (issue 56 item 3) at level 2, in PyTorch's loop and a framework's: read
around the training passes (each epoch's pass; a framework's timed steps), never around evaluation;
"unavailable" with the reason where nothing is readable. Level 3's per-host combination; its real
ranks are metered in tests/test_early_stop_level3.py (one launch for both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5pipe.core.outcome import PointOutcome
from d5pipe.levels.level2.point import run_point
from d5pipe.levels.level3.outcome import energy_of
from d5pipe.measure import energy
from d5pipe.measure.energy import Counter, Meter
from tests.test_level2 import make_ctx
from tests.test_metric_declarations import emitted_undeclared


class _Reads:
    """A fake counter that has spent 1 J more at every read: a span (two reads, nothing reading the
    meter between them) counts 1 J."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.reads * 1000  # milli-joules


def _fake(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    reads = _Reads()
    meter = Meter("fake counter", [Counter("package-0", Path(), 2**64, 1e-3, True)], reader=reads)
    monkeypatch.setattr(energy, "meter", lambda device="cpu": meter)
    return reads


def _m(out: PointOutcome) -> dict[str, object]:
    return {m.name: m.value for m in out.metrics}


def test_level2_loop_meters_each_epochs_training_pass_and_not_its_evaluation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch)
    out = run_point(make_ctx(tmp_path, {"epochs": 2}))
    m = _m(out)
    assert out.extra["energy"]["joules"] == pytest.approx(2.0)  # one span (1 J) per epoch's pass, none per step
    assert m["energy_per_step"] == pytest.approx(2.0 / m["train_steps"])  # type: ignore[operator]
    assert m["power"] > 0  # type: ignore[operator]
    assert out.extra["energy"]["method"] == "fake counter" and out.extra["energy"]["calls"] == m["train_steps"]
    assert emitted_undeclared("level2", out.metrics) == []  # docs/reference/metrics.md names each


def test_level2_framework_meters_its_timed_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch)
    out = run_point(make_ctx(tmp_path, {"epochs": 1, "framework": "torch", "optimizer": "sgd"}))
    m = _m(out)
    assert out.extra["energy"]["joules"] == pytest.approx(m["train_steps"])  # one span (1 J) per timed step
    assert m["energy_per_step"] == pytest.approx(1.0) and "framework.step" in out.extra["energy"]["what"]
    assert emitted_undeclared("level2", out.metrics) == []


def test_level2_without_a_counter_records_unavailable_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(energy.POWERCAP_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setattr(energy, "meter", lambda device="cpu": energy.rapl())
    out = run_point(make_ctx(tmp_path, {"epochs": 1}))
    assert out.extra["energy"]["available"] is False and "nowhere" in out.extra["energy"]["reason"]
    assert not {"energy_per_step", "power"} & set(_m(out))


def test_level3_sums_one_record_per_host_over_the_steps_run() -> None:
    def rec(joules: float, seconds: float) -> dict[str, object]:
        return {"available": True, "method": energy.RAPL_METHOD, "joules": joules, "watts": joules / seconds}

    ranks = [{"rank": 0, "energy": rec(6.0, 2.0)}, {"rank": 1, "energy": None},
             {"rank": 2, "energy": rec(4.0, 2.0)}, {"rank": 3, "energy": None}]  # two hosts, two ranks each
    out = PointOutcome()
    energy_of(ranks, 5, out)
    m = _m(out)
    assert m["energy_per_step"] == pytest.approx(2.0) and m["power"] == pytest.approx(5.0)
    assert out.extra["energy"]["measured_by"] == [0, 2] and "once per host" in out.extra["energy"]["what"]
    missing = PointOutcome()
    energy_of([{"rank": 0, "energy": {"available": False, "reason": "no RAPL: why"}}, {"rank": 1}], 5, missing)
    assert missing.metrics == [] and missing.extra["energy"] == {"available": False, "reason": "no RAPL: why",
                                                                 "measured_by": [0]}
