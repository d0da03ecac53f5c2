"""Plug-ins: one ``_target_`` convention, an allow-list only the runner sets, user code in the point ID.

* Targets outside the runner's allow-list, or not importable-looking, are one line naming the key,
  exit 2, before any import: a package whose import writes a file is named by a config (plan),
  by a config that tries to widen the list (``operators.allowed_prefixes``) and by a bundle
  (reproduce), and the file never appears.
* The allow-list comes from ``--allow``, ``$D5PIPE_ALLOW`` and the user file only.
* Planning never imports user code, even allowed; its source hash is part of the point ID, so
  editing one module changes exactly the IDs of the points that use it, and the plan says why.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from d5pipe import D5PipeError
from d5pipe.core import allowlist as plugins
from tests.conftest import d5pipe

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "plugin_fixtures"


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No allow-list from the environment or a user file; the side-effect marker's path."""
    monkeypatch.delenv("D5PIPE_ALLOW", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES))
    marker = tmp_path / "imported.txt"
    monkeypatch.setenv("D5PIPE_TEST_SIDE_EFFECT", str(marker))
    return marker


def _experiment(tmp_path: Path, operators: dict[str, Any], name: str = "plug") -> Path:
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True, exist_ok=True)
    body = {"name": name, "seed": 1, "repetitions": 1, "stages": ["level0"], "operators": {"op": "mine", "size": 16, **operators}}
    (conf / "experiment" / f"{name}.yaml").write_text("# @package _global_\n" + yaml.safe_dump(body))
    return conf


# --- the allow-list --------------------------------------------------------------------------------

def test_allow_list_sources_and_prefix_semantics(env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert plugins.allow_list() == ("d5pipe",)
    monkeypatch.setenv("D5PIPE_ALLOW", "envpkg, other.sub.")
    user_file = tmp_path / "xdg" / "d5pipe" / "allow.yaml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("allow: [filepkg]\n")
    assert plugins.allow_list() == ("d5pipe", "envpkg", "other.sub", "filepkg")
    assert "clipkg" in plugins.allow(["clipkg"]) and "clipkg" in plugins.env_prefixes()  # children inherit
    allowed = plugins.allow_list()
    assert plugins.module_allowed("envpkg.models.Net", allowed)
    assert plugins.module_allowed("other.sub.x", allowed) and not plugins.module_allowed("other.x", allowed)
    assert not plugins.module_allowed("envpkg_evil.x", allowed) and not plugins.module_allowed("os.system", allowed)
    with pytest.raises(D5PipeError, match="--allow"):
        plugins.allow(["not a name"])


@pytest.mark.parametrize("value, key, why", [
    ({"_target_": "os system"}, "operators.custom.mine._target_", "not an importable path"),
    ({"_target_": 3}, "operators.custom.mine._target_", "not an importable path"),
    ({"width": 3}, "operators.custom.mine", "needs a '_target_'"),
    ("justaname", "operators.custom.mine", "not an importable path"),
    ({"_target_": "d5pipe.levels.level0.operators.builtin_spec",
      "inner": {"_target_": "side_effect_pkg.ops.SPEC"}}, "operators.custom.mine.inner", "outside the allow-list"),
])
def test_bad_targets_are_one_line_naming_the_key_exit_2(env: Path, tmp_path: Path, value: Any, key: str,
                                                         why: str) -> None:
    conf = _experiment(tmp_path, {"custom": {"mine": value}})
    r = d5pipe("plan", "plug", "--config-dir", str(conf), "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and f"key '{key}'" in r.stderr and why in r.stderr
    assert not env.exists()


def test_a_target_outside_the_allow_list_is_never_imported(env: Path, tmp_path: Path) -> None:
    conf = _experiment(tmp_path, {"custom": {"mine": "side_effect_pkg.ops:SPEC"}})
    r = d5pipe("plan", "plug", "--config-dir", str(conf), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "operators.custom.mine" in r.stderr and "--allow side_effect_pkg" in r.stderr
    assert not env.exists(), "the package was imported before it was refused"
    # the config cannot widen the list: the deprecated key only repeats what the runner allows
    conf = _experiment(tmp_path, {"custom": {"mine": "side_effect_pkg.ops:SPEC"},
                                  "allowed_prefixes": ["d5pipe.", "side_effect_pkg"]})
    r = d5pipe("plan", "plug", "--config-dir", str(conf), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "operators.allowed_prefixes" in r.stderr and "cannot widen" in r.stderr
    assert not env.exists()
    # allowed by the runner: planned, and still not imported (planning reads files, imports nothing)
    r = d5pipe("plan", "plug", "--config-dir", str(conf), "--out", str(tmp_path / "run"), "--allow", "side_effect_pkg",
               "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["code"] == ["side_effect_pkg.ops"]
    assert not env.exists()


def test_a_bundle_naming_a_module_outside_the_list_is_refused_before_any_import(
        env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.config.compose import compose_plain
    from d5pipe.provenance.bundle import write_checksums

    conf = _experiment(tmp_path, {"custom": {"mine": {"_target_": "side_effect_pkg.ops.SPEC"}}})
    config = compose_plain("plug", [], [conf])  # composing checks values, imports nothing
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.yaml").write_text(yaml.safe_dump(config))
    (bundle / "manifest.json").write_text("{}\n")
    (bundle / "code" / "side_effect_pkg").mkdir(parents=True)
    (bundle / "code" / "side_effect_pkg" / "__init__.py").write_text(
        (FIXTURES / "side_effect_pkg" / "__init__.py").read_text())
    write_checksums(bundle)
    monkeypatch.setenv("PYTHONPATH", "")  # only the bundle's code/ could provide the package
    r = d5pipe("reproduce", str(bundle), "--out", str(tmp_path / "again"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "side_effect_pkg.ops.SPEC" in r.stderr and "outside the allow-list" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not env.exists(), "reproduce imported the bundle's module before refusing it"


# --- user code in the point ID ---------------------------------------------------------------------

def _user_package(root: Path) -> None:
    pkg = root / "userpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""User package."""\n')
    (pkg / "helpers.py").write_text("SCALE = 1.0\n")
    (pkg / "ops_a.py").write_text(textwrap.dedent('''
        from d5pipe.levels.level0.operators import MATMUL
        from .helpers import SCALE
        SPEC = MATMUL
    '''))
    (pkg / "ops_b.py").write_text("from d5pipe.levels.level0.operators import MATMUL\nSPEC = MATMUL\n")


def _config(tmp_path: Path) -> dict[str, Any]:
    from d5pipe.config.compose import compose_plain

    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True, exist_ok=True)
    (conf / "experiment" / "code.yaml").write_text(textwrap.dedent("""
        # @package _global_
        name: code
        repetitions: 1
        stages: [level0]
        operators:
          size: 16
          custom: {a: "userpkg.ops_a:SPEC", b: {_target_: userpkg.ops_b.SPEC}}
        sweep:
          grid: {operators.op: [matmul, a, b], operators.size: [16, 32]}
    """))
    return compose_plain("code", [], [conf])


def test_editing_one_module_changes_exactly_its_points_and_plan_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.config.code_dir import read_index, stale_reasons, write_code
    from d5pipe.plan.build import build_plan

    src = tmp_path / "src"
    _user_package(src)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setenv("D5PIPE_ALLOW", "userpkg")
    config = _config(tmp_path)
    before = build_plan(config)
    assert "userpkg.ops_a" not in sys.modules and "userpkg" not in sys.modules  # planning imports nothing
    assert sorted(before.code) == ["userpkg.ops_a", "userpkg.ops_b"]
    assert before.code["userpkg.ops_a"].files == ("userpkg/__init__.py", "userpkg/helpers.py", "userpkg/ops_a.py")
    run = tmp_path / "run"
    assert write_code(run, before.code) == ["userpkg/__init__.py", "userpkg/helpers.py", "userpkg/ops_a.py",
                                            "userpkg/ops_b.py"]
    assert (run / "code" / "userpkg" / "helpers.py").read_text() == "SCALE = 1.0\n"

    (src / "userpkg" / "helpers.py").write_text("SCALE = 1.01\n")  # imported by ops_a only
    after = build_plan(config)
    sp0, sp1 = before.stages["level0"], after.stages["level0"]
    changed = {sp0.params_dict(i)["operators.op"] for i, (x, y) in enumerate(zip(sp0.point_ids, sp1.point_ids))
               if x != y}
    assert changed == {"a"}
    assert after.code["userpkg.ops_b"].sha256 == before.code["userpkg.ops_b"].sha256
    points = {m: [(pid, False) for pid, mods in zip(sp1.point_ids, sp1.modules) if m in mods] for m in after.code}
    assert stale_reasons(read_index(run), after.code, points) == [
        "2 points stale: source of userpkg.ops_a changed (userpkg/helpers.py)"]
    done = {m: [(pid, True) for pid, _ in entries] for m, entries in points.items()}
    assert stale_reasons(read_index(run), after.code, done) == [  # never "0 points stale"
        "source of userpkg.ops_a changed since the last run (userpkg/helpers.py); the 2 points of this version "
        "already have records"]


def test_only_points_naming_user_code_carry_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.plan.build import build_plan

    src = tmp_path / "src"
    _user_package(src)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setenv("D5PIPE_ALLOW", "userpkg")
    plan = build_plan(_config(tmp_path))
    sp = plan.stages["level0"]
    ids_with = {sp.params_dict(i)["operators.op"]: sp.modules[i] for i in range(len(sp.point_ids))}
    assert ids_with == {"matmul": (), "a": ("userpkg.ops_a",), "b": ("userpkg.ops_b",)}


def test_builtins_and_user_targets_take_one_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from d5pipe.levels.optim import make_optimizer
    from d5pipe.levels.targets import target_of

    assert target_of({"name": "mlp", "hidden": [8], "dropout": 0.0}, "model") == (
        "model.name", {"_target_": "d5pipe.levels.models.mlp", "hidden": [8], "dropout": 0.0})
    monkeypatch.setenv("D5PIPE_ALLOW", "torch_free_nothing")
    import torch

    params = [torch.nn.Parameter(torch.zeros(2))]
    rms = make_optimizer({"optimizer": "rms", "custom_optimizers": {
        "rms": {"_target_": "d5pipe.levels.optim.torch_optimizer", "cls": "RMSprop", "lr": 0.01}}}, params)
    assert type(rms).__name__ == "RMSprop" and rms.param_groups[0]["lr"] == 0.01
    with pytest.raises(D5PipeError, match="train.custom_optimizers.evil"):
        make_optimizer({"optimizer": "evil", "custom_optimizers": {"evil": "os.system"}}, params)
