"""Config composition errors: one line naming the key (and file), exit 2 from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5pipe import D5PipeError
from d5pipe.config.compose import compose_config
from tests.conftest import d5pipe


def _write(d: Path, rel: str, text: str) -> None:
    p = d / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


@pytest.fixture()
def user_conf(tmp_path: Path) -> Path:
    _write(tmp_path, "experiment/typo.yaml", "# @package _global_\nname: typo\nstages: [level0]\noperators:\n  sise: 3\n")
    _write(tmp_path, "experiment/wrongtype.yaml", "# @package _global_\nname: w\nstages: [level2]\ntrain:\n  epochs: many\n")
    _write(tmp_path, "experiment/noname.yaml", "# @package _global_\nstages: [level0]\n")
    _write(tmp_path, "experiment/badsweep.yaml",
           "# @package _global_\nname: b\nstages: [level0]\nsweep:\n  grid:\n    operators.size: [8, big]\n")
    _write(tmp_path, "experiment/mine.yaml",
           "# @package _global_\ndefaults:\n  - override /model: wide\nname: mine\nstages: [level1]\n")
    _write(tmp_path, "experiment/evil.yaml",
           "# @package _global_\nname: evil\nstages: [level0]\noperators:\n  op: boom\n  custom:\n    boom: 'os:system'\n")
    _write(tmp_path, "model/wide.yaml", "name: mlp\nhidden: [128, 128]\n")
    return tmp_path


def test_quickstart_composes() -> None:
    cfg = compose_config("quickstart")
    assert cfg.name == "quickstart" and cfg.seed == 1234


def test_user_config_dir_is_searched(user_conf: Path) -> None:
    cfg = compose_config("mine", [], [user_conf])
    assert list(cfg.model.hidden) == [128, 128]


@pytest.mark.parametrize(
    ("experiment", "overrides", "expected"),
    [
        ("typo", [], "key 'operators.sise' in experiment/typo.yaml"),
        ("wrongtype", [], "key 'train.epochs' in experiment/wrongtype.yaml"),
        ("noname", [], "key 'name'"),
        ("badsweep", [], "sweep.grid.operators.size: value 'big'"),
        ("mine", ["train.lr=fast"], "key 'train.lr'"),
        ("mine", ["model.widht=3"], "key 'model.widht'"),
        ("nosuch", [], "unknown experiment 'nosuch'"),
        ("evil", [], "os:system"),
    ],
)
def test_errors_name_key_and_file(user_conf: Path, experiment: str, overrides: list[str], expected: str) -> None:
    from d5pipe.execute.run import load_plan

    with pytest.raises(D5PipeError) as err:
        load_plan(experiment, overrides, [str(user_conf)])
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("experiment", "named"), [("typo", "operators.sise"), ("evil", "os:system")])
def test_cli_user_error_is_one_line_exit_2(user_conf: Path, experiment: str, named: str) -> None:
    r = d5pipe("plan", experiment, "--config-dir", str(user_conf), timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in r.stderr


def test_sweep_axis_override_from_command_line() -> None:
    cfg = compose_config("quickstart", ["sweep.grid.distributed.ranks=[1,2,4]", "train.epochs=2"])
    assert list(cfg.sweep.grid["distributed.ranks"]) == [1, 2, 4]
    assert cfg.train.epochs == 2
    with pytest.raises(D5PipeError, match="sweep.grid.distributed.ranks: value 'x'"):
        compose_config("quickstart", ["sweep.grid.distributed.ranks=[1,x]"])


def test_command_line_can_add_a_sweep_axis_but_not_an_unknown_key() -> None:
    cfg = compose_config("quickstart", ["sweep.grid.train.lr=[0.01,0.1]"])
    assert list(cfg.sweep.grid["train.lr"]) == [0.01, 0.1]
    assert "distributed.ranks" in cfg.sweep.grid  # the experiment's own axes stay
    from d5pipe.execute.run import load_plan

    with pytest.raises(D5PipeError, match="sweep axis 'train.lrr': no such config key"):
        load_plan("quickstart", ["sweep.grid.train.lrr=[0.01]"])
