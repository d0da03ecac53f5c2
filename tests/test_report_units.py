"""Readable numbers: SI/binary prefixes, no scientific notation for times, natural order, integer
axes without ``.0``, and ``d5pipe compare`` text that fits 120 columns with units."""

from __future__ import annotations

import pandas as pd
import pytest

from d5pipe.results.compare import WIDTH, PointComparison, RunComparison, format_table
from d5pipe.results.metric_compare import Comparison
from d5pipe.results.report.frames import fmt_plain, fmt_value, natural_order
from d5pipe.results.report.units import axis_scale, bytes_tick, natural_key, quantity


@pytest.mark.parametrize(("value", "unit", "text"), [
    (4.983e-05, "s", "49.83 µs"),
    (0.0001289, "s", "128.9 µs"),
    (0.002147, "s", "2.147 ms"),
    (2.4e-9, "s", "2.4 ns"),
    (1.5, "s", "1.5 s"),
    (1.5 * 2**20, "B", "1.5 MiB"),
    (196608.0, "B", "192 KiB"),
    (3 * 2**30, "B", "3 GiB"),
    (0.7812, "GB/s", "781.2 MB/s"),
    (32.53, "GFLOP/s", "32.53 GFLOP/s"),
    (1250.0, "GFLOP/s", "1.25 TFLOP/s"),
    (4.194e6, "FLOP", "4.194 MFLOP"),
    (1.238e5, "samples/s", "123.8 k samples/s"),
    (0.0, "GB/s", "0 GB/s"),
    (0.9356, "", "0.9356"),
    (3.0, "epochs", "3 epochs"),
])
def test_quantity(value: float, unit: str, text: str) -> None:
    assert quantity(value, unit) == text


def test_ci_shares_the_unit_of_its_median_and_times_are_never_scientific() -> None:
    assert fmt_value(4.983e-05, 4.9e-05, 5.1e-05, "s") == "49.83 [49, 51] µs"
    for v in (1.3e-9, 7.7e-7, 4.983e-05, 0.0123, 12.0, 4321.0):
        assert "e" not in fmt_value(v, v * 0.9, v * 1.1, "s").split()[0]
    assert fmt_value(None, text="pass") == "pass"


def test_axis_scale_and_ticks() -> None:
    assert axis_scale([2e-5, 5e-5, 9e-5], "s") == pytest.approx((1e6, "µs"))
    assert axis_scale([], "s") == (1.0, "s")
    assert bytes_tick(1024) == "1 KiB" and bytes_tick(268435456) == "256 MiB"


def test_integer_axes_print_as_integers() -> None:
    assert fmt_plain(64.0) == "64" and fmt_plain(pd.array([128], dtype="Int64")[0]) == "128"
    assert fmt_plain(pd.NA) == "" and fmt_plain(float("nan")) == "" and fmt_plain(0.003) == "0.003"
    assert fmt_plain(True) == "true" and fmt_plain("eager") == "eager"


def test_natural_order() -> None:
    assert sorted(["size128", "size64", "size256"], key=natural_key) == ["size64", "size128", "size256"]
    assert sorted([256, 64, 128.0], key=natural_key) == [64, 128.0, 256]
    assert sorted(["b", None, "a"], key=natural_key) == ["a", "b", None]
    rows = pd.DataFrame({"point_id": ["p128", "p256", "p64"], "operators.size": pd.array([128, 256, 64], "Int64")})
    assert natural_order(rows, ["operators.size"]) == ["p64", "p128", "p256"]


def test_compare_table_fits_120_columns_with_units() -> None:
    long_id = "size131072-dtype_bfloat16-layout_transposed-impl_compile-269d17adb774"
    comps = [
        Comparison("time", "timing", "changed", 4.983e-05, 6.1e-05, unit="s", rel_change=0.224,
                   direction="higher", p_value=1e-6),
        Comparison("gflops", "timing", "changed", 32.53, 26.6, unit="GFLOP/s", rel_change=-0.18,
                   direction="lower", p_value=1e-6),
        Comparison("bytes", "deterministic", "reproduced", 1.5 * 2**20, 1.5 * 2**20, unit="B"),
        Comparison("iqr", "info", "not_compared", 1e-6, 1e-6, unit="s"),
    ]
    params = {"operators.size": 131072, "operators.dtype": "bfloat16", "operators.layout": "transposed",
              "operators.impl": "compile", "operators.op": "matmul", "operators.batch": 4}
    text = format_table(RunComparison([PointComparison("level0", long_id, params, comps)], [], []))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[1].startswith("level0 size131072-dtype_bfloat16-l…269d17adb774  (batch=4")  # start + hash kept
    metric_lines = [line for line in lines if line.startswith("  ") and not line.lstrip().startswith("metric")]
    assert [line.split()[0] for line in metric_lines] == ["time", "gflops", "bytes"]  # one metric per line, no info
    assert "49.83 µs" in metric_lines[0] and "61 µs" in metric_lines[0] and "changed (higher)" in metric_lines[0]
    assert "32.53 GFLOP/s" in metric_lines[1] and "1.5 MiB" in metric_lines[2]
    assert "e-05" not in text
