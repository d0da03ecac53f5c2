"""Every bad value is one line naming the key, exit 2, from `d5pipe plan` -- before any job.

The CLI entry point runs in-process here (same code path as the `d5pipe` command; the
subprocess form is covered in test_config.py), so each field costs a compose, not an interpreter.
"""

from __future__ import annotations

import sys

import pytest

from d5pipe.cli.main import main

BAD_VALUES = [
    # (override, key the one-line message must name)
    ("level1.impl=foo", "level1.impl"),
    ("level1.dtype=float8", "level1.dtype"),
    ("level1.batch_size=0", "level1.batch_size"),
    ("train.optimizer=sgdd", "train.optimizer"),
    ("train.schedule=sometimes", "train.schedule"),
    ("train.lr=0", "train.lr"),
    ("train.epochs=0", "train.epochs"),
    ("train.batch_size=-1", "train.batch_size"),
    ("train.target_accuracy=1.5", "train.target_accuracy"),
    ("train.sampler=nope", "train.sampler"),
    ("train.prefetch_factor=0", "train.prefetch_factor"),
    ("train.sampler_alpha=1", "train.sampler_alpha"),
    ("stages=[level3] train.sampler=my +train.custom_samplers.my=x.y", "train.sampler"),
    ("model.name=resnet9000", "model.name"),
    ("model.hidden=[64,0]", "model.hidden"),
    ("+model.hiddenn=[3]", "model.hiddenn"),
    ("dataset.name=imagenet", "dataset.name"),
    ("dataset.test_fraction=1.0", "dataset.test_fraction"),
    ("dataset.storage=tape", "dataset.storage"),
    ("dataset.storage=npy", "dataset.storage"),  # the quickstart's levels 1 and 3 would not read it
    ("stages=[level2] dataset.storage=png dataset.name=wine", "dataset.storage"),
    ("stages=[level2] dataset.storage=png dataset.name=synthetic_images dataset.image_shape=[3,8,8]",
     "dataset.storage"),
    ("dataset.pixels=uint8", "dataset.pixels"),
    ("stages=[level2] dataset.storage=lazy", "dataset.storage"),
    ("train.augment=rotate", "train.augment"),
    ("stages=[level2] train.augment=flip dataset.name=wine", "train.augment"),
    ("distributed.backend=nope", "distributed.backend"),
    ("distributed.mode=async", "distributed.mode"),
    ("distributed.scaling=diagonal", "distributed.scaling"),
    ("distributed.benchmark=bench", "distributed.benchmark"),
    ("distributed.launcher=pdsh", "distributed.launcher"),
    ("distributed.steps=0", "distributed.steps"),
    ("distributed.target_loss=-1", "distributed.target_loss"),
    ("distributed.bind=socket", "distributed.bind"),
    ("distributed.buffer=numpy", "distributed.buffer"),
    ("distributed.buffer=peer", "distributed.buffer"),  # a training point allocates no buffer of its own
    ("distributed.timeout_s=-5", "distributed.timeout_s"),
    ("distributed.global_batch=63", "distributed.global_batch"),
    ("model.norm=layer", "model.norm"),
    ("sweep.grid.distributed.ranks=[4] distributed.strategy=ps_sync distributed.global_batch=32",
     "distributed.global_batch"),  # 4 ranks share 32, the 3 workers beside the server cannot
    ("sweep.grid.distributed.ranks=[0,1]", "distributed.ranks"),
    ("operators.op=foo", "operators.op"),
    ("operators.impl=foo", "operators.impl"),
    ("operators.dtype=int3", "operators.dtype"),
    ("operators.device=tpu", "operators.device"),
    ("sweep.grid.operators.size=[64,0]", "operators.size"),
    ("timer.budget_s=0", "timer.budget_s"),
    ("timer.target_ci_pct=-1", "timer.target_ci_pct"),
    ("timer.min_samples=0", "timer.min_samples"),
    ("timer.max_samples=5", "timer.max_samples"),
    ("shards.points_per_shard=-1", "shards.points_per_shard"),
    ("shards.target_s=0", "shards.target_s"),
    ("shards.max_jobs_per_stage=-1", "shards.max_jobs_per_stage"),
    ("executor.jobs=0", "executor.jobs"),
    ("executor.retries=-1", "executor.retries"),
    ("executor.resources.level0.cpus_per_task=0", "executor.resources.level0.cpus_per_task"),
    ("executor.resources.default.nodes=0", "executor.resources.default.nodes"),
    ("+executor.resources.level9.nodes=1", "level9"),
    ("report.alpha=2", "report.alpha"),
    ("stages=[level0,level7]", "stages"),
    ("stages=[]", "stages"),
    ("train.optimizer=lion", "train.optimizer"),  # swept in the experiment below: never ignored
]


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(["plan", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("override", "key"), BAD_VALUES)
def test_bad_value_is_one_line_naming_the_key(capsys: pytest.CaptureFixture[str], override: str,
                                              key: str) -> None:
    experiment = "train_digits" if override.startswith("train.optimizer=lion") else "quickstart"
    rc, err = _plan(capsys, experiment, *override.split(" "))
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in err, err


def test_overriding_a_swept_key_says_how_to_narrow_the_axis(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _plan(capsys, "train_digits", "train.optimizer=lion")
    assert rc == 2 and "sweep.grid.train.optimizer=[...]" in err


def test_the_narrowing_syntax_works(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "train_digits", "sweep.grid.train.optimizer=[sgd]", "--json"])
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("args", [["--jobs", "0"], ["--jobs", "-1"], ["--timeout", "-5"], ["--timeout", "0"]])
def test_bad_run_options_exit_2_before_any_job(tmp_path, capsys: pytest.CaptureFixture[str],
                                               args: list[str]) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["run", "quickstart", "--out", str(out), *args])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists()  # nothing was planned, nothing started


def test_a_bad_value_in_run_starts_no_job(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "quickstart", "distributed.backend=nope", "--out", str(out)]) == 2
    assert not out.exists()


def test_planning_imports_neither_torch_nor_scipy_nor_pandas() -> None:
    import subprocess

    code = ("import sys; from d5pipe.cli.main import main; main(['plan', 'quickstart']); "
            "print(sorted(m for m in ('torch', 'scipy', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
