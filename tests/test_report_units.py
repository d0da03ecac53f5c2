"""Readable numbers: SI/binary prefixes, no scientific notation for times, natural order, integer
axes without ``.0``, and ``d5pipe compare`` text that fits 120 columns with units."""

from __future__ import annotations

import pandas as pd
import pytest

from d5pipe.results.compare import PointComparison, RunComparison
from d5pipe.results.compare_table import WIDTH, format_table
from d5pipe.results.metric_compare import Comparison
from d5pipe.results.repetition_values import Side
from d5pipe.results.report.frames import fmt_plain, fmt_value, natural_order
from d5pipe.results.report.units import axis_scale, bytes_tick, natural_key, quantity
from d5pipe.results.timing_compare import Item, compare_family


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
    a, b = [4.9e-05, 5.0e-05, 5.05e-05], [6.0e-05, 6.1e-05, 6.2e-05]
    timings = compare_family([Item("time", "s", Side.of(a), Side.of(b)),
                              Item("gflops", "GFLOP/s", Side.of([1.6e-3 / x for x in a]), Side.of([1.6e-3 / x for x in b]),
                                   derived_from="time")])
    comps = [Comparison("bytes", "deterministic", "not_reproduced", 1.5 * 2**20, 1.5 * 2**21, unit="B",
                        detail="1572864 != 3145728"),
             Comparison("flops", "deterministic", "reproduced", 1e9, 1e9),
             Comparison("iqr", "info", "not_compared", 1e-6, 1e-6, unit="s")]
    params = {"operators.size": 131072, "operators.dtype": "bfloat16", "operators.layout": "transposed",
              "operators.impl": "compile", "operators.op": "matmul", "operators.batch": 4}
    text = format_table(RunComparison([PointComparison("level0", long_id, params, comps, timings)], [], []))
    lines = text.splitlines()
    assert max(len(line) for line in lines[:-1]) <= WIDTH
    assert lines[1].startswith("level0 size131072-dtype_bfloat16-l…269d17adb774  (batch=4")  # start + hash kept
    assert lines[2].split()[0] == "time" and "49.83 µs x3" in lines[2] and "60.99 µs x3" in lines[2]
    assert "+22.4% [" in lines[2] and "changed (slower)" in lines[2]
    assert lines[3].strip() == "(gflops follow time)"  # the same test, shown once
    assert "bytes: differs: 1.5 MiB -> 3 MiB" in lines[4]
    assert "1 other metric(s) identical" in lines[5]  # flops; the info metric is left out
    assert lines[-1].startswith("1 timings (measured in separate runs): 1 changed (1 slower, 0 faster)")
    assert "e-05" not in text
