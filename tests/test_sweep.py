"""Sweep expansion: cartesian, zip, exclude, and every error case."""

from __future__ import annotations

import pytest

from d5pipe import D5PipeError
from d5pipe.plan.sweep import expand, project


def test_cartesian_order_and_count() -> None:
    axes, pts = expand({"grid": {"a.x": [1, 2, 3], "a.y": ["p", "q"]}})
    assert axes == ("a.x", "a.y")
    assert pts == [(1, "p"), (1, "q"), (2, "p"), (2, "q"), (3, "p"), (3, "q")]


def test_zip_varies_together_with_grid() -> None:
    axes, pts = expand({"grid": {"a.d": ["f32", "f16"]}, "zip": [{"a.m": [1, 2], "a.n": [10, 20]}]})
    assert axes == ("a.d", "a.m", "a.n")
    assert pts == [("f32", 1, 10), ("f32", 2, 20), ("f16", 1, 10), ("f16", 2, 20)]


def test_exclude_drops_matching_partial_assignments() -> None:
    axes, pts = expand(
        {
            "grid": {"a.x": [1, 2], "a.y": ["p", "q"], "a.z": [True, False]},
            "exclude": [{"a.x": 2, "a.y": "q"}, {"a.z": False, "a.x": 1}],
        }
    )
    assert (2, "q", True) not in pts and (2, "q", False) not in pts
    assert (1, "p", False) not in pts and (1, "q", False) not in pts
    assert sorted(pts) == sorted([(1, "p", True), (1, "q", True), (2, "p", True), (2, "p", False)])


def test_project_dedupes_in_order() -> None:
    axes, pts = expand({"grid": {"a.x": [1, 2], "b.y": [5, 6, 7]}})
    sub_axes, sub = project(axes, pts, ["b.y"])
    assert sub_axes == ("b.y",) and sub == [(5,), (6,), (7,)]


@pytest.mark.parametrize(
    ("sweep", "culprit"),
    [
        ({"grid": {"a.x": []}}, "sweep.grid.a.x: axis has no values"),
        ({"zip": [{"a.m": [1, 2], "a.n": [1]}]}, "sweep.zip[0]: zipped axes have unequal lengths"),
        ({"grid": {"a.x": [1]}, "exclude": [{"a.q": 1}]}, "sweep.exclude[0]: unknown axis 'a.q'"),
        ({"grid": {"a.x": [1, 2]}, "exclude": [{"a.x": 1}, {"a.x": 2}]}, "expands to no points"),
        ({"grid": {"a.x": [1, 1]}}, "sweep.grid.a.x: duplicate value 1"),
        ({"zip": [{"a.m": [1, 1], "a.n": [2, 2]}]}, "sweep.zip[0]: duplicate row"),
        ({"grid": {"a.x": [1]}, "zip": [{"a.x": [2]}]}, "axis 'a.x' is declared twice"),
    ],
)
def test_errors_name_the_culprit(sweep: dict, culprit: str) -> None:
    with pytest.raises(D5PipeError) as err:
        expand(sweep)
    msg = str(err.value)
    assert culprit in msg
    assert "\n" not in msg


def test_hundred_thousand_points_plain_data() -> None:
    axes, pts = expand({"grid": {"a.x": list(range(100)), "a.y": list(range(100)), "a.z": list(range(10))}})
    assert len(pts) == 100_000
    assert len(set(pts)) == 100_000
