"""``d5pipe ab A B``: two sides measured at the same time, taking turns, then compared.

A side is a run directory or a bundle: its ``config.yaml`` (two configs, e.g. one with
``executor.resources.level0.cpus_per_task=2``), its user code (``code/``: two versions of an
operator), and the environment this command gives it (``--env-a``/``--env-b`` variables,
``--python-a``/``--python-b`` interpreters: two environments). Both are re-run from their configs
into ``OUT/a`` and ``OUT/b``:

1. **Interleaved.** The two sides' runs go at the same time; their shard jobs meet by stage and
   shard and take turns block by block (d5pipe.measure.lockstep): nothing of one side runs while
   the other times a block, and a drift of the machine hits both alike (randomized multiple
   interleaved trials; who starts each shard is drawn from ``--seed``). Stages whose level times
   its own steps (training, distributed) run one side after the other, shard by shard.
2. **Paired.** Repetition r of A and repetition r of B were measured in the same seconds, so each
   timing is compared on the log ratios of the repetitions (paired t), by the one comparison model
   (d5pipe.results.timing_compare).
3. **Until decided** (``--until-decided``): while some timing is inconclusive, its configuration
   gets more repetitions on both sides (``OUT/<side>/plan/repetitions.json``; at most doubling per
   round, up to its estimate of the repetitions that would decide), until every timing is decided,
   ``--max-repetitions`` is reached or ``--budget`` seconds are spent; the timings left undecided
   are named.

``OUT/ab.json`` holds the comparison of every round.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from d5pipe.core.atomic import read_json, write_json
from d5pipe.core.errors import D5PipeError
from d5pipe.execute.decide import grow, wants_of_comparison
from d5pipe.measure import lockstep
from d5pipe.plan.point_config import fewest_repetitions
from d5pipe.results.compare import RunComparison, compare_runs, to_json
from d5pipe.results.metric_compare import ComparePolicy
from d5pipe.results.profile_changes import explain_comparison
from d5pipe.results.repetition_values import planned_looks
from d5pipe.results.timing_compare import Policy
from d5pipe.rundir.layout import RunDir

SIDES = ("a", "b")
AB_FILE = "ab.json"
AB_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SideSpec:
    """Where a side comes from and what it runs with."""

    source: Path
    """An opened run directory (a bundle extracted)."""
    env: Mapping[str, str] = field(default_factory=dict)
    python: str = sys.executable


@dataclass
class AbResult:
    out: Path
    comparison: RunComparison
    rounds: list[dict[str, Any]]
    lockstep: bool
    seconds: float
    exit_codes: dict[str, int]
    alone: int = 0
    """Points of either side that met no partner and were measured alone (not interleaved)."""


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / AB_FILE).is_file()
                                              and not (out / "a").is_dir())):
        raise D5PipeError(f"{out}: exists and is not an earlier `d5pipe ab` output; choose another --out")


def _prepare_side(spec: SideSpec, target: Path) -> None:
    """Copy the side's config (and extra repetitions) into ``target``, once; check its targets
    against the runner's allow-list before anything of it is imported."""
    import yaml

    from d5pipe.config.validate import check_config
    from d5pipe.levels.registry import check_config_targets

    src = RunDir.of(spec.source)
    if not src.config_path.is_file():
        raise D5PipeError(f"{spec.source}: no config.yaml (not a run directory or bundle)")
    config = yaml.safe_load(src.config_path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise D5PipeError(f"{src.config_path}: not a d5pipe config")
    try:
        check_config(config)
        check_config_targets(config)
    except D5PipeError as exc:
        raise D5PipeError(f"{spec.source}: {exc}") from None
    from d5pipe.rundir.ownership import claim

    target.mkdir(parents=True, exist_ok=True)
    dst = RunDir.of(target)
    claim(dst, str(config["name"]))  # the side's run directory, before anything is put into it
    if not dst.config_path.is_file():
        shutil.copyfile(src.config_path, dst.config_path)
        if src.repetitions_path.is_file():
            dst.plan_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src.repetitions_path, dst.repetitions_path)


def _side_env(spec: SideSpec, side: str, pair_dir: str | None, seed: int) -> dict[str, str]:
    env = dict(os.environ)
    code = spec.source / "code"
    path = [str(code.resolve())] if code.is_dir() else []
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(spec.env)
    for key in (lockstep.ENV_DIR, lockstep.ENV_SIDE, lockstep.ENV_SEED):
        env.pop(key, None)
    if pair_dir is not None:
        env[lockstep.ENV_DIR] = pair_dir
        env[lockstep.ENV_SIDE] = side
        env[lockstep.ENV_SEED] = str(seed)
    return env


def _run_both(specs: Mapping[str, SideSpec], out: Path, repetitions: int | None, pair_dir: str | None,
              seed: int, log: Path) -> dict[str, int]:
    """Both sides' runs at the same time (each a ``python -m d5pipe.execute.rerun`` process); their
    exit codes. Output goes to ``log``; a side that cannot run at all is a one-line error."""
    procs = {}
    with open(log, "a", encoding="utf-8") as fh:
        for side in SIDES:
            rd = out / side
            cmd = [specs[side].python, "-m", "d5pipe.execute.rerun", str(rd / "config.yaml"), str(rd)]
            if repetitions is not None:
                cmd.append(str(repetitions))
            fh.write(f"== side {side}: {' '.join(cmd)}\n")
            fh.flush()
            procs[side] = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                           env=_side_env(specs[side], side, pair_dir, seed))
        codes = {side: p.wait() for side, p in procs.items()}
    for side, code in codes.items():
        if code not in (0, 3):
            raise D5PipeError(f"ab: side {side} did not run (exit {code}); see {log}")
    return codes


def run_ab(specs: Mapping[str, SideSpec], out: Path, repetitions: int | None, timing: Policy,
           policy: ComparePolicy | None = None, seed: int = 0, interleave: bool = True,
           until_decided: bool = False, budget_s: float = 0.0, max_repetitions: int = 20) -> AbResult:
    """See the module docstring."""
    out = Path(out)
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    for side in SIDES:
        _prepare_side(specs[side], out / side)
    log = out / "ab.log"
    if until_decided:  # every look decides at alpha / looks: stopping at the first decision stays honest
        start = repetitions or fewest_repetitions(RunDir.of(out / "a").config)
        timing = replace(timing, looks=planned_looks(start, max_repetitions))
    t0 = time.perf_counter()
    rounds: list[dict[str, Any]] = []
    with _pair_dir(interleave) as pair_dir:
        paired = pair_dir is not None
        while True:  # one round: both sides run, then compared
            codes = _run_both(specs, out, None if rounds else repetitions, pair_dir, seed, log)
            paired = paired and _same_shape(out)
            comparison = compare_runs(out / "a", out / "b", policy, allow_different=True, timing=timing,
                                      paired=paired)
            rounds.append(_round_entry(comparison, time.perf_counter() - t0))
            if not until_decided or not comparison.counts()["inconclusive"]:
                break
            last = rounds[-1]["seconds"] - (rounds[-2]["seconds"] if len(rounds) > 1 else 0.0)
            if budget_s > 0 and time.perf_counter() - t0 + last > budget_s:
                break
            wants = wants_of_comparison(comparison, max_repetitions)
            if not sum(grow(out / side, wants, timing.looks) for side in SIDES):
                break
    explain_comparison(comparison, out / "a", out / "b")  # where the time went, when both sides profiled
    alone = measured_alone(out) if pair_dir is not None else 0
    result = AbResult(out, comparison, rounds, pair_dir is not None, time.perf_counter() - t0, codes, alone)
    write_json(out / AB_FILE, {"schema_version": AB_SCHEMA_VERSION,
                               "sides": {s: {"source": str(specs[s].source), "env": dict(specs[s].env),
                                             "python": specs[s].python} for s in SIDES},
                               "interleaved": result.lockstep, "paired": comparison.paired, "seed": seed,
                               "measured_alone": alone,
                               "seconds": result.seconds, "rounds": rounds, "comparison": to_json(comparison)})
    return result


def measured_alone(out: Path) -> int:
    """Point records of either side whose timer met no partner (``extra.lockstep.paired`` false):
    those points were measured alone, not interleaved with the other side."""
    n = 0
    for side in SIDES:
        for record in (out / side / "points").glob("*/*.json"):
            lock = (read_json(record, {}).get("extra") or {}).get("lockstep")
            n += isinstance(lock, dict) and not lock.get("paired", True)
    return n


def _same_shape(out: Path) -> bool:
    """Whether both sides have, per stage, shards of the same numbers of points: then they are
    paired shard by shard."""
    a, b = ({stage: [len(rd.shard_spec(stage, s)["points"]) for s in rd.shards(stage)] for stage in rd.stages()}
            for rd in (RunDir.of(out / side) for side in SIDES))
    return a == b


def _round_entry(comparison: RunComparison, seconds: float) -> dict[str, Any]:
    return {"seconds": round(seconds, 3), "counts": comparison.counts(),
            "undecided": [f"{p.stage}/{p.point_id} {t.metric}" for p in comparison.points for t in p.timings
                          if t.verdict == "inconclusive" and not t.derived_from]}


@contextlib.contextmanager
def _pair_dir(interleave: bool) -> Iterator[str | None]:
    """A short directory for the pair's sockets (a Unix socket path has at most 107 bytes)."""
    if not interleave:
        yield None
        return
    path = tempfile.mkdtemp(prefix="d5ab-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
