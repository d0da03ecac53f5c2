"""placement.node: the same point on each of N distinct nodes -- plan, local skip, node lists, report."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from d5pipe import D5PipeError
from d5pipe.config.compose import compose_plain
from d5pipe.execute import placement
from d5pipe.plan.build import build_plan
from d5pipe.results.report.node_section import variability_rows

TEST_CONF = Path(__file__).resolve().parent / "configs"


def _plan(*overrides: str) -> Any:
    return build_plan(compose_plain("nodes", list(overrides), [str(TEST_CONF)]))


def test_each_node_gets_its_own_shards_and_the_default_leaves_ids_alone() -> None:
    plan = _plan("shards.points_per_shard=4")
    sp = plan.stages["level0"]
    assert len(sp.point_ids) == 6 and len(set(sp.point_ids)) == 6
    nodes = [sp.params_dict(i)["placement.node"] for i in range(6)]
    assert nodes == [1, 1, 2, 2, 3, 3]
    for k in range(sp.n_shards):  # a shard never mixes nodes, whatever points_per_shard says
        assert len({nodes[i] for i in sp.shard_slice(k)}) == 1
    assert sp.n_shards == 3
    # without the axis, placement is not part of a point's identity: IDs as before it existed
    cfg = compose_plain("nodes", [], [str(TEST_CONF)])
    del cfg["sweep"]["grid"]["placement.node"]
    plain = build_plan(cfg).stages["level0"].point_ids
    cfg["placement"] = {"node": 1}
    pinned = build_plan(cfg).stages["level0"].point_ids
    cfg["placement"] = {"node": 0}
    assert build_plan(cfg).stages["level0"].point_ids == plain
    assert not set(pinned) & set(plain)
    assert not set(plain) & set(sp.point_ids)


def test_a_local_run_skips_nodes_beyond_the_first(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = cli("run", "nodes", "--config-dir", str(TEST_CONF), "--out", str(run))
    records = [json.loads(p.read_text()) for p in (run / "points" / "level0").glob("*.json")]
    assert len(records) == 6, r.stdout + r.stderr
    by_node = {n: {rec["status"] for rec in records if rec["params"]["placement.node"] == n} for n in (1, 2, 3)}
    assert by_node == {1: {"ok"}, 2: {"skipped"}, 3: {"skipped"}}
    for rec in records:
        if rec["status"] == "skipped":
            n = rec["params"]["placement.node"]
            assert rec["error"] == f"placement.node={n} needs the slurm executor (a local run has one node)"
    assert r.returncode == 0 and "4 skipped" in r.stdout  # skipped with a reason is not a failure


def _fake_sinfo(bin_dir: Path, lines: str) -> None:
    bin_dir.mkdir()
    exe = bin_dir / "sinfo"
    exe.write_text("#!/bin/sh\ncat <<'END'\n" + lines + "END\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_nodes_come_from_sinfo_in_natural_order_and_unusable_ones_are_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sinfo(tmp_path / "bin", "n10 idle\nn2 mix\nn1 alloc\nn3 down*\nn4 drain\nn2 mix\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    placement.partition_nodes.cache_clear()
    assert placement.partition_nodes("") == ("n1", "n2", "n10")
    assert placement.nodelist_option(3) == "--nodelist=n10"
    assert placement.nodelist_option(0) == ""
    with pytest.raises(D5PipeError, match=r"placement.node: 4 is beyond the 3 responding node\(s\)"):
        placement.node_name(4)
    plan = _plan("executor=slurm", "sweep.grid.placement.node=[1,2,4]")
    with pytest.raises(D5PipeError, match="placement.node: 4 is beyond"):
        placement.check_nodes(plan)
    placement.partition_nodes.cache_clear()


def test_the_report_sets_the_spread_between_nodes_next_to_the_ci_within_one() -> None:
    rows = []
    for size, base in ((8, 1.0e-3), (16, 2.0e-3)):
        for node, factor in ((1, 1.0), (2, 1.3), (3, 1.1)):
            v = base * factor
            rows.append({"stage": "level0", "status": "ok", "metric": "time", "unit": "s", "value": v,
                         "ci_low": v * 0.99, "ci_high": v * 1.01, "point_id": f"p{size}-{node}",
                         "operators.size": size, "placement.node": node})
    found = variability_rows(pd.DataFrame(rows), "level0")
    assert [r["label"] for r in found] == ["operators.size=8", "operators.size=16"]
    for r in found:
        assert [n for n, _, _ in r["per_node"]] == [1, 2, 3]
        assert r["spread"] == pytest.approx(0.3 / 1.1)
        assert r["within"] == pytest.approx(0.01)
        assert math.isfinite(r["spread"]) and r["spread"] / 2 > r["within"]
