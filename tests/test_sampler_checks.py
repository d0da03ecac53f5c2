"""A training run's input pipeline: the checks of a user's sampler (issue 38, item 4) and the time
steps wait for their batches (item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from d5pipe.levels.level2.point import run_point
from tests.conftest import PLUGIN_FIXTURES
from tests.test_level2 import make_ctx, metric

SAMPLERS = {"correct": "user_samplers.correct", "biased": "user_samplers.ClassZeroTwice",
            "replacement": "user_samplers.with_replacement", "unseeded": "user_samplers.Unseeded"}


@pytest.fixture()
def allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGIN_FIXTURES))
    monkeypatch.setenv("D5PIPE_ALLOW", "user_samplers")


def train_with(tmp_path: Path, sampler: str, **extra: Any) -> Any:
    train = {"epochs": 1, "sampler": sampler, "custom_samplers": SAMPLERS, **extra}
    return run_point(make_ctx(tmp_path, train, work=sampler))


def verdicts(out: Any) -> dict[str, str]:
    return {m.name: m.value for m in out.metrics if m.name.startswith("sampler_") and m.kind == "verdict"}


def test_a_correct_sampler_passes_every_check_and_orders_the_training(tmp_path: Path, allowed: None) -> None:
    out = train_with(tmp_path, "correct")
    assert verdicts(out) == {"sampler_once_per_epoch": "pass", "sampler_class_histogram": "pass",
                             "sampler_seeded_order": "pass"}
    assert metric(out, "sampler_histogram_p").value == pytest.approx(1.0)
    # the user's RandomSampler with the point's seeded generator is the built-in shuffle's permutation
    builtin = run_point(make_ctx(tmp_path, {"epochs": 1}, work="builtin"))
    assert metric(out, "weights_sha256").value == metric(builtin, "weights_sha256").value


def test_a_biased_sampler_fails_the_histogram_and_a_repeating_one_the_once_per_epoch_check(
        tmp_path: Path, allowed: None) -> None:
    biased = verdicts(train_with(tmp_path, "biased"))
    assert biased["sampler_class_histogram"] == "fail"
    assert biased["sampler_once_per_epoch"] == "fail"  # class 0 twice: repeated, too
    assert biased["sampler_seeded_order"] == "pass"
    out = train_with(tmp_path, "replacement")
    assert verdicts(out)["sampler_once_per_epoch"] == "fail"
    detail = next(m.detail for m in out.metrics if m.name == "sampler_once_per_epoch")
    assert "drawn more than once" in detail and " 0 never" not in detail
    assert verdicts(train_with(tmp_path, "unseeded"))["sampler_seeded_order"] == "fail"


def test_every_step_waits_for_its_batch_and_the_stall_is_its_share(tmp_path: Path) -> None:
    out = run_point(make_ctx(tmp_path, {"epochs": 2}))
    waits, steps = out.samples["data_wait_s"], out.samples["step_time_s"]
    assert len(waits) == len(steps) and all(w >= 0 for w in waits)
    stall = metric(out, "data_stall_fraction")
    assert stall.kind == "timing" and 0 < stall.value < 1
    assert len(out.samples["epoch_stall_fraction"]) == 2 and len(out.samples["first_batch_s"]) == 2
    # first_batch_s is each epoch's first wait (the loader's start), taken from the waits themselves
    per_epoch = len(waits) // 2
    assert out.samples["first_batch_s"] == [waits[0], waits[per_epoch]]
    for e, share in enumerate(out.samples["epoch_stall_fraction"]):  # waits / (waits + steps), per epoch
        w, t = waits[e * per_epoch:(e + 1) * per_epoch], steps[e * per_epoch:(e + 1) * per_epoch]
        assert share == pytest.approx(sum(w) / (sum(w) + sum(t)))
    first = metric(out, "first_batch_s")
    assert first.ci_low <= first.value <= first.ci_high
