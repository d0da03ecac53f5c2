"""Adding an engine is one file: a toy level-1 runtime (tests/plugin_fixtures/toy_runtime.py) and a
toy level-2 training framework (tests/plugin_fixtures/toy_framework.py), each one new file plus the
config that names it (tests/configs/experiment/toy_engines.yaml), run through ``d5pipe run`` (real
Snakemake) with their checks: the runtime's outputs against the float64 reference, the
framework's steps against PyTorch's in float64."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from tests.conftest import PLUGIN_FIXTURES, TEST_CONF, d5pipe


def test_a_toy_runtime_and_a_toy_framework_run_with_their_checks(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = os.pathsep.join(filter(None, [str(PLUGIN_FIXTURES), os.environ.get("PYTHONPATH")]))
    r = d5pipe("run", "toy_engines", "--config-dir", str(TEST_CONF), "--out", str(out), "--allow", "toy_runtime",
               "--allow", "toy_framework", env={"PYTHONPATH": path, "XDG_CONFIG_HOME": str(tmp_path / "no-config")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    df = pd.read_parquet(out / "results.parquet").set_index(["stage", "metric"])
    assert df.loc[("level1", "output_check"), "text"] == "pass"
    assert df.loc[("level1", "inference_latency"), "value"] > 0
    assert ("level1", "fwd_bwd_time") not in df.index  # a runtime other than PyTorch itself runs inference only
    assert df.loc[("level2", "framework_check"), "text"] == "pass"
    assert df.loc[("level2", "framework_update_rel_l2"), "value"] < 1e-10  # float64: the same steps as PyTorch's
    assert df.loc[("level2", "step_time"), "value"] > 0
    records = {rec["stage"]: rec for rec in (json.loads(p.read_text()) for p in (out / "points").glob("*/*.json"))}
    assert records["level1"]["extra"]["runtime"]["told"]["how"] == "torch.func.functional_call"
    assert records["level2"]["extra"]["versions"] == {"torch": records["level2"]["extra"]["versions"]["torch"]}
