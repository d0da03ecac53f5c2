"""Energy per point (issue 56): RAPL through a powercap tree (a fake one here: this machine has
none), wraps and which zones add up, the timer's record and metrics, and "unavailable" with its
reason where nothing can be read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from d5pipe.measure import energy
from d5pipe.measure.energy import Meter, Span, Unavailable, energy_metrics, rapl


def fake_powercap(root: Path, package_uj: int = 1_000, dram_uj: int = 50, wrap: int = 10**9) -> Path:
    """One package with core and dram subzones, as Linux's intel_rapl driver lays them out."""
    zones = {"intel-rapl:0": ("package-0", package_uj), "intel-rapl:0:0": ("core", 400),
             "intel-rapl:0:1": ("dram", dram_uj)}
    for zone, (name, value) in zones.items():
        (root / zone).mkdir(parents=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "energy_uj").write_text(f"{value}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return root


def bump(root: Path, zone: str, by: int, wrap: int = 10**9) -> None:
    path = root / zone / "energy_uj"
    path.write_text(f"{(int(path.read_text()) + by) % wrap}\n")


def test_rapl_counts_packages_and_dram_not_the_packages_own_subzones_and_survives_a_wrap(tmp_path: Path) -> None:
    root = fake_powercap(tmp_path / "powercap", package_uj=10**9 - 500, wrap=10**9)
    meter = rapl(root)
    assert isinstance(meter, Meter)
    assert [c.name for c in meter.counters] == ["package-0", "package-0/core", "package-0/dram"]
    before = meter.read()
    bump(root, "intel-rapl:0", 2_000_000)  # wraps past max_energy_range_uj
    bump(root, "intel-rapl:0:0", 1_500_000)
    bump(root, "intel-rapl:0:1", 300_000)
    joules = meter.joules(before, meter.read())
    assert joules == pytest.approx({"package-0": 2.0, "package-0/core": 1.5, "package-0/dram": 0.3})
    assert meter.total(joules) == pytest.approx(2.3)  # core is inside the package's count


def test_no_powercap_no_zone_or_unreadable_counters_each_give_a_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = rapl(tmp_path / "nowhere")
    assert isinstance(missing, Unavailable) and "does not exist" in missing.reason
    (tmp_path / "empty").mkdir()
    assert "no intel-rapl zone" in rapl(tmp_path / "empty").reason  # type: ignore[union-attr]
    root = fake_powercap(tmp_path / "powercap")
    monkeypatch.setattr(energy.os, "access", lambda path, mode: not str(path).endswith("energy_uj"))
    denied = rapl(root)
    assert isinstance(denied, Unavailable) and "root-only" in denied.reason and "package-0" in denied.reason
    assert denied.describe() == {"available": False, "reason": denied.reason}


def test_the_timer_records_the_energy_of_its_timed_calls_and_the_metrics_follow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call of the timed function spends exactly 1 mJ on the (fake) package: the timer's
    record says 1 mJ per call, counted over every timed call and none of the warm-up's."""
    from d5pipe.measure.timer import measure

    root = fake_powercap(tmp_path / "powercap")
    monkeypatch.setattr(energy, "meter", lambda device="cpu": rapl(root))
    m = measure(lambda: bump(root, "intel-rapl:0", 1_000),
                {"warmup_s": 0.0, "warmup_max_iters": 3, "budget_s": 0.05, "min_samples": 3, "max_samples": 5})
    record = m.energy
    assert record["available"] and record["method"] == energy.RAPL_METHOD
    assert record["joules_per_call"] == pytest.approx(1e-3)
    assert record["calls"] >= m.calls_per_block * len(m.samples)
    assert m.info()["energy"] == record
    metrics = {x.name: x for x in energy_metrics(record, "sample", 4.0, "_inference")}
    assert metrics["energy_per_sample_inference"].value == pytest.approx(2.5e-4)
    assert metrics["energy_per_sample_inference"].unit == "J" and metrics["power_inference"].unit == "W"


def test_where_nothing_is_readable_the_timer_says_why_and_no_metric_is_made() -> None:
    from d5pipe.measure.timer import measure

    source = energy.meter("cpu")
    m = measure(lambda: None, {"warmup_max_iters": 1, "budget_s": 0.01, "min_samples": 3, "max_samples": 3})
    if isinstance(source, Unavailable):  # this machine: no /sys/class/powercap
        assert m.energy == {"available": False, "reason": source.reason} and source.reason
        assert energy_metrics(m.energy) == []
    else:
        assert m.energy["available"] and m.energy["joules"] >= 0


def test_the_report_says_unavailable_with_the_reason_or_how_energy_was_measured() -> None:
    from d5pipe.results.report.sections import energy_fact

    reason = "no RAPL: /sys/class/powercap does not exist (no powercap driver, or not Linux)"
    none = SimpleNamespace(results=pd.DataFrame({"metric": ["time"]}),
                           manifest={"environment": {"energy": {"available": False, "reason": reason}}})
    assert energy_fact(none) == f"unavailable ({reason})"  # type: ignore[arg-type]
    some = SimpleNamespace(results=pd.DataFrame({"metric": ["time", "energy_per_call", "power"]}),
                           manifest={"environment": {"energy": Meter(energy.RAPL_METHOD, [], energy.RAPL_CAVEAT).describe()}})
    assert energy_fact(some).startswith("1 value(s) measured (RAPL")  # type: ignore[arg-type]


def test_a_span_with_no_blocks_records_nothing_per_call(tmp_path: Path) -> None:
    span = Span(rapl(fake_powercap(tmp_path / "powercap")))
    assert span.record(0)["joules_per_call"] is None and span.record(0)["joules"] == 0
