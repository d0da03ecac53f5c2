"""Config you can see: ``d5pipe plan --show-config`` prints the composed, validated config, and an
unknown key lists the valid keys of its section, closest matches first."""

from __future__ import annotations

import yaml

from d5pipe.config.validate import by_closeness, unknown_key
from tests.conftest import d5pipe


def test_show_config_prints_the_composed_validated_config() -> None:
    r = d5pipe("plan", "quickstart", "train.lr=0.0123", "--show-config")
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load(r.stdout)
    assert config["name"] == "quickstart" and config["train"]["lr"] == 0.0123  # the override is applied
    assert config["level1"]["runtime"] == "torch"  # schema defaults are filled in
    assert config["sweep"]["grid"]["operators.size"] == [64, 128, 256]
    bad = d5pipe("plan", "quickstart", "train.lr=-1", "--show-config")  # validated before printing
    assert bad.returncode == 2 and "train.lr" in bad.stderr and bad.stdout == ""


def test_an_unknown_key_lists_its_sections_valid_keys_closest_first() -> None:
    for override in ("level1.batchsize=3", "+level1.batchsize=3"):
        r = d5pipe("plan", "quickstart", override)
        assert r.returncode == 2
        [line] = r.stderr.strip().splitlines()
        assert "key 'level1.batchsize'" in line
        assert "not in the schema; valid keys of level1 (closest first): batch_size, " in line
        assert "runtime" in line and "output_check" in line  # the whole section, not only the close ones
    top = d5pipe("plan", "quickstart", "trian.lr=3")
    assert top.returncode == 2 and "valid keys of the config (closest first): train, " in top.stderr


def test_closeness_orders_matches_first_and_keeps_the_rest() -> None:
    assert by_closeness("batchsize", ["dtype", "batch_size", "impl"]) == ["batch_size", "dtype", "impl"]
    assert unknown_key("timer.budget").startswith("not in the schema; valid keys of timer (closest first): budget_s")
    assert unknown_key("nosuch.section.key") == "not in the schema"
