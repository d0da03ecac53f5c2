"""The machine's ceilings (d5pipe.measure.ceilings): roofline bounds, the disk cache and its lock,
and a point faster than its bound flagged in results.parquet and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from d5pipe.measure import ceilings as cm
from d5pipe.measure.ceilings import Ceilings, roofline
from tests.conftest import TEST_CONF, d5pipe

LEVELS = [["L1", 32 << 10], ["L2", 1 << 20], ["L3", 32 << 20]]


def stub(f32: float = 80e9, f16: float = 2e9, bf16: float = 200e9) -> Ceilings:
    rates = {str(16 << 10): 30e9, str(256 << 10): 75e9, str(4 << 20): 78e9, str(64 << 20): 22e9, str(256 << 20): 24e9}
    flops = {str(torch.float32): {"best": f32, "shape": "matmul 256x256x256", "rates": {"matmul 256x256x256": f32}},
             str(torch.float16): {"best": f16, "shape": "matmul 128x128x128", "rates": {"matmul 128x128x128": f16}},
             str(torch.bfloat16): {"best": bf16, "shape": "conv2d b=1 c=64 n=56", "rates": {"conv2d b=1 c=64 n=56": bf16}}}
    return Ceilings("k", "cpu", 1, flops, {"rates": rates, "levels": LEVELS}, {})


def test_the_roofline_bound_is_the_lower_of_compute_and_bandwidth() -> None:
    c = stub()
    n = 1024  # matmul: 2n^3 FLOPs on 3n^2 float32 values, in L3
    b = roofline(c, torch.float32, 2 * n**3, 3 * n * n * 4)
    assert (b.level, b.limited_by, b.gflops) == ("L3", "compute", pytest.approx(80.0))
    add = roofline(c, torch.float32, 1e6, 12e6)  # 1 FLOP per 12 bytes, 12 MB: bandwidth-bound
    assert add.limited_by == "bandwidth" and add.gflops == pytest.approx(1 / 12 * 78.0)
    copy = roofline(c, torch.float32, 0, 128 << 20)  # no FLOPs: the bandwidth alone, DRAM
    assert (copy.gflops, copy.level, copy.gbps) == (0.0, "DRAM", pytest.approx(24.0))


def test_a_working_set_is_bounded_by_the_best_rate_from_a_quarter_of_it_up() -> None:
    c = stub()
    assert c.bandwidth_bound(64 << 20) == (pytest.approx(24e9), "DRAM")  # 16 MiB and up: 22, 24
    assert c.bandwidth_bound(8 << 20)[0] == pytest.approx(78e9)  # 2 MiB and up include the L3 plateau
    assert c.bandwidth_bound(16 << 10)[1] == "L1"


def test_a_narrow_dtype_is_bounded_by_float32_where_that_is_faster() -> None:
    c = stub()
    assert c.flop_ceiling(torch.float16) == (80e9, "float32 matmul 256x256x256 (bounds float16 matmul 128x128x128)")
    assert c.flop_ceiling(torch.bfloat16)[0] == 200e9  # its own matmuls are faster


def test_ceilings_are_measured_once_per_machine_and_a_remeasure_only_raises_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("D5PIPE_CACHE_DIR", str(tmp_path))
    calls: list[str] = []
    flop_rate = {"v": 50e9}

    def flops(device: str, dtype: torch.dtype, only: frozenset[str] | None = None) -> dict[str, Any]:
        calls.append(str(dtype))
        return {"best": flop_rate["v"], "shape": "256", "rates": {"256": flop_rate["v"]}}

    def bandwidth(device: str) -> dict[str, Any]:
        calls.append("bw")
        return {"rates": {"1024": 10e9}, "levels": LEVELS}

    monkeypatch.setattr(cm, "measure_flops", flops)
    monkeypatch.setattr(cm, "measure_bandwidth", bandwidth)
    first = cm.machine_ceilings("cpu", (torch.float16,), threads=1)
    assert calls == ["bw", "torch.float32", "torch.float16"] and set(first.seconds) == {
        "bandwidth", "flops float32", "flops float16"}
    assert cm.cache_path(first.key).is_file()
    again = cm.machine_ceilings("cpu", (torch.float16,), threads=1, memo={})  # another process: the file
    assert len(calls) == 3 and again.flops == first.flops
    cm.machine_ceilings("cpu", (torch.bfloat16,), threads=1)  # a new dtype: only it is measured
    assert calls[3:] == ["torch.bfloat16"]
    flop_rate["v"] = 20e9  # a busy machine measures lower ...
    lower = cm.machine_ceilings("cpu", (), threads=1, remeasure=True)
    assert lower.flop_ceiling(torch.float32)[0] == 50e9  # ... and cannot lower a ceiling
    assert cm.machine_ceilings("cpu", (), threads=2).key != first.key  # per thread count


def test_a_refresh_times_the_fastest_kernels_again_and_only_raises(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("D5PIPE_CACHE_DIR", str(tmp_path))
    asked: list[frozenset[str] | None] = []
    rates = {"matmul 256x256x256": 90e9, "conv2d b=1 c=64 n=56": 100e9, "matmul 512x512x512": 80e9}

    def flops(device: str, dtype: torch.dtype, only: frozenset[str] | None = None) -> dict[str, Any]:
        asked.append(only)
        got = {k: v for k, v in rates.items() if only is None or k in only}
        best = max(got, key=lambda k: got[k])
        return {"best": got[best], "shape": best, "rates": got}

    monkeypatch.setattr(cm, "measure_flops", flops)
    monkeypatch.setattr(cm, "measure_bandwidth", lambda device: {"rates": {"1024": 10e9}, "levels": LEVELS})
    assert cm.machine_ceilings("cpu", (), threads=1).flop_ceiling(torch.float32)[0] == 100e9
    rates.update({"conv2d b=1 c=64 n=56": 95e9, "matmul 256x256x256": 104e9})  # a faster moment for one
    up = cm.machine_ceilings("cpu", (), threads=1, memo={}, refresh=(torch.float32,))
    assert asked == [None, frozenset({"conv2d b=1 c=64 n=56", "matmul 256x256x256"})]  # the two fastest
    assert up.flop_ceiling(torch.float32) == (104e9, "float32 matmul 256x256x256")  # raised, never lowered
    assert up.flops[str(torch.float32)]["rates"]["conv2d b=1 c=64 n=56"] == 100e9
    assert "flops float32 refresh" in up.seconds


def test_a_point_faster_than_its_bound_is_flagged_in_the_results_and_the_report(tmp_path: Path) -> None:
    """Stubbed ceilings (1 MFLOP/s, 1 MB/s) in the run's user cache: every point is above its bound."""
    cache = tmp_path / "cache"
    for threads in (1, 2):
        key = cm.machine_key("cpu", threads)
        c = stub(f32=1e6)
        c.bandwidth["rates"] = {k: 1e6 for k in c.bandwidth["rates"]}
        # kernels no refresh can time again: the point near (above) its ceiling cannot raise it
        c.flops = {k: {"best": v["best"], "shape": "stub", "rates": {"stub": v["best"]}} for k, v in c.flops.items()}
        path = cache / "ceilings" / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**c.to_json(), "key": key, "threads": threads}))
    run = tmp_path / "run"
    r = d5pipe("run", "tiny", "--config-dir", str(TEST_CONF), "--out", str(run), "operators.peak=true",
               "sweep.grid.operators.size=[32]", env={"D5PIPE_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    df = pd.read_parquet(run / "results.parquet")
    flagged = df[df["metric"] == "plausibility:above_bound"]
    assert len(flagged) == 1 and flagged["text"].item() == "warn"
    assert "not an upper bound" in flagged["error"].item()
    assert df.loc[df["metric"] == "pct_of_bound", "value"].item() > 100
    assert "above_bound" in (run / "report.html").read_text(encoding="utf-8")
    [record] = [json.loads(p.read_text()) for p in (run / "points" / "level0").glob("*.json")]
    suspect = record["extra"]["roofline"]["suspect"]  # the ceilings it beat, named in its record
    assert any(s.startswith("flops") and "float32" in s for s in suspect) and any(s.startswith("bandwidth") for s in suspect)
    assert any("marked suspect" in w for w in record["extra"]["warnings"])
    assert record["extra"]["roofline"]["ceiling_refreshed"] is True  # it was close: checked again first
