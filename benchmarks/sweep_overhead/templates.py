"""Torch-free pieces of bench_sweep_overhead: the point grid, the generated configs and Snakefiles.

Every level-0 point is operator ``sum`` over ``(batch, size, size)`` with exactly 10 timed samples
(``min_samples = max_samples = 10``, one warm-up call, a 50 ms budget that 10 blocks of a tiny
``sum`` never reach), no correctness/gradient checks, no backward timing and no peak measurement.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path

TIMER = {"warmup_s": 0.0, "warmup_max_iters": 1, "min_block_s": 1.0e-5, "budget_s": 0.05,
         "min_samples": 10, "max_samples": 10}
OPERATORS = {"op": "sum", "peak": False, "check_correctness": False, "check_backward": False,
             "time_backward": False}
SAMPLES = 10
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
"""What Snakemake gives every job of a ``threads: 1`` rule; the peers and the floor get the same."""


def grid(n: int) -> tuple[int, int]:
    """``(batches, sizes)`` with ``batches x sizes == n``: sizes 1..<=50, batch 1..n/sizes."""
    nb = max(1, n // 50)
    while n % nb:
        nb -= 1
    return nb, n // nb


def _flow(d: Mapping[str, object]) -> str:
    return json.dumps(d)  # JSON is YAML flow style


def level0_experiment(name: str, n: int) -> str:
    nb, ns = grid(n)
    # one process per point, as the README's figures were measured (before repetitions existed)
    return (f"# @package _global_\nname: {name}\nseed: 7\nstages: [level0]\nrepetitions: 1\n"
            f"timer: {_flow(TIMER)}\noperators: {_flow(OPERATORS)}\n"
            f"sweep:\n  grid:\n    operators.batch: {list(range(1, nb + 1))}\n"
            f"    operators.size: {list(range(1, ns + 1))}\n")


L3_POINTS = 8
L3_STEPS = 300
"""Timed steps per level-3 point: about a second of training each on this machine, so that the
case shows what the harness adds to points of real work (a fresh launch, the shard, the report)."""
L3_DISTRIBUTED = {"backend": "ddp", "ranks": 2, "benchmark": "train", "steps": L3_STEPS, "warmup_steps": 2,
                  "threads_per_rank": 1}


def level3_experiment(name: str) -> str:
    lrs = [round(0.01 * (k + 1), 3) for k in range(L3_POINTS)]
    return (f"# @package _global_\nname: {name}\nseed: 11\nstages: [level3]\n"
            "model: {name: mlp, hidden: [16]}\n"
            "dataset: {name: synthetic, image_shape: [], n_features: 8, n_classes: 4, n_samples: 256}\n"
            "train: {optimizer: sgd, lr: 0.01, device: cpu}\n"
            f"distributed: {_flow(L3_DISTRIBUTED)}\n"
            f"sweep:\n  grid:\n    train.lr: {lrs}\n")


def write_conf_dir(conf: Path, sizes: list[int], l3: bool) -> dict[int, str]:
    """Experiments ``ovh<N>`` for each N (and ``ovh1``), ``ovhl3``; returns N -> experiment name."""
    (conf / "experiment").mkdir(parents=True, exist_ok=True)
    names = {n: f"ovh{n}" for n in sorted({1, *sizes})}
    for n, name in names.items():
        (conf / "experiment" / f"{name}.yaml").write_text(level0_experiment(name, n))
    if l3:
        (conf / "experiment" / "ovhl3.yaml").write_text(level3_experiment("ovhl3"))
    return names


# (b) one Snakemake job per point: a fresh Python process that imports d5pipe and runs that point.
PER_POINT_SNAKEFILE = """
NB, NS = int(config["nbatch"]), int(config["nsize"])
rule all:
    input: expand("out/b{{b}}_s{{s}}.json", b=range(1, NB + 1), s=range(1, NS + 1))
rule point:
    output: "out/b{{b}}_s{{s}}.json"
    shell: {command}
"""


def write_snakefile(path: Path, python: str, job: Path) -> None:
    command = f"{shlex.quote(python)} {shlex.quote(str(job))} job {{wildcards.b}} {{wildcards.s}} {{output}}"
    path.write_text(PER_POINT_SNAKEFILE.format(command=json.dumps(command)))


def snakemake_cmd(python: str, snakefile: Path, workdir: Path, n: int, cores: int = 2) -> list[str]:
    nb, ns = grid(n)
    return [python, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
            "--cores", str(cores), "--config", f"nbatch={nb}", f"nsize={ns}"]


def touch_finished(workdir: Path, n: int) -> None:
    """The outputs of ``n`` one-point jobs, written directly (as if every job had finished)."""
    nb, ns = grid(n)
    out = workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    for b in range(1, nb + 1):
        for s in range(1, ns + 1):
            (out / f"b{b}_s{s}.json").write_text('{"status": "ok"}\n')


# (c) Hydra's basic launcher: the app lives in sweep_overhead/hydra_app.py, its config is generated.
def write_hydra_conf(conf: Path) -> None:
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "app.yaml").write_text("operators:\n  batch: 1\n  size: 1\n")


def hydra_cmd(python: str, app: Path, conf: Path, sweep_dir: Path, n: int) -> list[str]:
    nb, ns = grid(n)
    return [python, str(app), "--config-path", str(conf), "--config-name", "app", "--multirun",
            f"operators.batch=range(1,{nb + 1})", f"operators.size=range(1,{ns + 1})",
            f"hydra.sweep.dir={sweep_dir}"]
