"""Level 3's allreduce held against a bare OSU-style loop in the same engine, interleaved (issue 59).

For each engine available (mpi4py, torch.distributed over gloo, Horovod if importable) and each
message size (default 1 MiB and 16 MiB) on ``--ranks`` ranks, two kinds of fresh launch:

* **d5pipe**: one level-3 collective point through ``run_point`` (``reuse_ranks: false``, so each is
  a launch of its own), on the engine's own tensor (``distributed.buffer: engine``) and, for mpi4py,
  also on the peers' allocation (``buffer: peer``, a numpy array; for torch.distributed and Horovod
  the peers allocate torch tensors, the same buffer as ``engine``);
* **bare**: ``benchmarks/bare_collective.py``, launched the same way (d5pipe's ``build_launch``:
  same launcher, environment, threads and ``distributed.bind`` placement) -- a barrier, each rank
  times its own in-place allreduce, buffers allocated as the peers allocate them; for mpi4py also
  (``bare:engine``) on a torch tensor's memory, as d5pipe's engine buffer is.

Each d5pipe side is judged against the bare side allocated alike: ``d5pipe:engine`` against
``bare:engine`` (mpi4py) or ``bare`` (torch.distributed and Horovod, whose peers allocate torch
tensors), ``d5pipe:peer`` against ``bare``.

Both sides combine ranks as OSU and nccl-tests do: the maximum over ranks per iteration, then the
median over the iterations. Each round runs every (engine, size, side) once: the (engine, size)
blocks in a random order, and the sides of a block back to back in a random order (Abedi & Brecht's
randomized interleaved trials), so drift on a shared machine hits all sides, and the launches compared
with each other run next to each other in time. Printed per engine, size and buffer: each side's
median over the rounds of its launches' values, the ratio d5pipe / bare and its 95% CI from d5pipe's
own comparison model (Welch's t on the logs, bare as the baseline; unpaired) with its verdict at a 10%
margin (``equivalent``: the whole CI within x1.1) and how many launches would decide, and the spread
between rounds (min and max of each side's launches). Then the same comparison paired by round
(:func:`paired`): the median of the per-round ratios with its CI from order statistics. On this VM
a launch lands in one of two speed states, which hold for a few seconds and change within a launch
too (a 1 MiB mpi4py allreduce: about 88 or 184 us, for d5pipe and the bare loop alike); adjacent
launches often share the state, so the per-round ratio cancels it, and a round whose launches straddle
a change is one outlying ratio, which moves a median little. Where the launches fall in two such
states (a gap of x1.5 or more with none between, found from every side's launches together:
:func:`state_cut`), the paired comparison follows over the rounds whose two launches fell in one
state, and the unpaired comparison within each state, with how many launches of each side landed in it. Then the
placement (binding, each rank's CPUs, the engine's polling threads and their nice values as the
ranks found them) and the allocation (allocator, bytes on huge pages) of each side.

Usage: python benchmarks/bench_collectives_peer.py [--rounds 5] [--sizes 1048576,16777216]
       [--engines mpi,ddp,horovod] [--ranks 2] [--steps 100] [--warmup 10] [--bind auto|core|none]
       [--seed 0] [--json out.json] | --replay out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BARE_MODULE = "benchmarks.bare_collective"
NAMES = {"mpi": "mpi4py", "ddp": "torch.distributed (gloo)", "horovod": "horovod"}
MARGIN = 0.10
"""The equivalence margin of the verdict: a factor 1.1 either way."""


def available(engine: str) -> bool:
    """Whether this environment can run ``engine``."""
    return engine == "ddp" or importlib.util.find_spec({"mpi": "mpi4py", "horovod": "horovod"}[engine]) is not None


def d5pipe_side(engine: str, size: int, buffer: str, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One level-3 collective point, as ``d5pipe run`` runs it (a launch of its own)."""
    from d5pipe.levels.contract import PointContext
    from d5pipe.levels.level3.point import run_point

    dist = {"backend": engine, "ranks": a.ranks, "benchmark": "collective", "collective": "allreduce",
            "message_bytes": size, "steps": a.steps, "warmup_steps": a.warmup, "launcher": "auto",
            "threads_per_rank": a.threads, "oversubscribe": True, "timeout_s": a.timeout, "reuse_ranks": False,
            "bind": a.bind, "buffer": buffer, "extra_args": []}
    cfg = {"name": "bench", "seed": 0, "distributed": dist, "train": {"device": "cpu"}}
    out = run_point(PointContext("bench", "level3", work.name, {}, cfg, 0, work, work, work, {"name": "local"}))
    metrics = {m.name: m.value for m in out.metrics}
    launch = out.extra["launch"]
    return {"times_s": out.samples["iter_time_max_s"], "binding": launch["binding"], "rank_cpus": launch["rank_cpus"],
            "polling_threads": launch["polling_threads"],
            "page_offsets": [a.get("page_offset") for a in out.extra.get("allocation", [])],
            "allocator": metrics.get("buffer_allocator"), "huge_page_bytes": metrics.get("buffer_huge_page_bytes"),
            "threads_per_rank": launch["threads_per_rank"], "argv": launch["argv"]}


def bare_side(engine: str, size: int, allocation: str, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The bare loop on its ranks, launched as d5pipe launches its workers, its buffer allocated as the
    peers allocate it (``peer``) or as d5pipe's engine buffer is (``engine``); times are max over ranks."""
    from d5pipe.levels.level3.launch import build_launch
    from d5pipe.levels.level3.outcome import max_over_ranks
    from d5pipe.levels.level3.session import run_once

    out_dir = work / "ranks"
    out_dir.mkdir(parents=True)
    plan = build_launch(backend=engine, ranks=a.ranks, spec_path=out_dir, threads_per_rank=a.threads, bind=a.bind,
                        module=BARE_MODULE, worker_args=[engine, str(size), str(a.warmup), str(a.steps), str(out_dir), allocation])
    run_once(plan, work, work / "launch.log", a.timeout)
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(a.ranks)]
    return {"times_s": max_over_ranks([r["times_s"] for r in ranks]), "binding": plan.binding,
            "rank_cpus": {str(r["rank"]): r["cpus"] for r in ranks}, "allocator": ranks[0]["allocator"],
            "polling_threads": {str(r["rank"]): r["polling_threads"] for r in ranks},
            "page_offsets": [r.get("page_offset") for r in ranks],
            "huge_page_bytes": min(int(r["huge_page_bytes"] or 0) for r in ranks),
            "threads_per_rank": plan.threads_per_rank, "argv": plan.argv}


def run(side: str, engine: str, size: int, a: argparse.Namespace, work: Path) -> dict[str, Any] | None:
    """One fresh launch of ``side`` (``bare``, ``bare:engine``, ``d5pipe:engine`` or ``d5pipe:peer``);
    None if it failed."""
    work.mkdir(parents=True)
    try:
        if side.startswith("bare"):
            return bare_side(engine, size, "engine" if side == "bare:engine" else "peer", a, work)
        return d5pipe_side(engine, size, side.split(":")[1], a, work)
    except Exception as exc:  # noqa: BLE001 - one failed launch is reported, the rounds go on
        print(f"  {engine} {size} {side}: FAILED {type(exc).__name__}: {str(exc)[-800:]}", file=sys.stderr)
        return None


def sides_of(engine: str) -> list[str]:
    """d5pipe on the engine's tensor and the bare loop on the peers' allocation; where the two differ
    (mpi4py: torch's memory, numpy's), also d5pipe on the peers' and the bare loop on the engine's."""
    return ["d5pipe:engine", *(["d5pipe:peer", "bare:engine"] if engine == "mpi" else []), "bare"]


def baseline(side: str, got: dict[tuple[str, int, str], list[dict[str, Any] | None]], engine: str, size: int) -> str:
    """The bare side a d5pipe side is judged against: the one allocated alike (``bare:engine`` for
    ``d5pipe:engine`` where it ran, else ``bare``)."""
    alike = "bare:engine" if side == "d5pipe:engine" else "bare"
    return alike if any(r is not None for r in got.get((engine, size, alike), [])) else "bare"


def pollers(per_rank: dict[str, list[dict[str, Any]]]) -> str:
    """The engine's polling threads each rank ended with and their nice values, as found in the ranks."""
    found = sorted({f"{t['name']} at nice {t['nice']}" for threads in per_rank.values() for t in threads})
    return "polling threads: " + (", ".join(found) if found else "none known")


def fmt_us(seconds: float) -> str:
    return f"{1e6 * seconds:,.0f}"


STATE_GAP = 1.5
"""Launch values this far apart (a factor) with none between are two states of the machine, not a
difference a side could make (the verdict's margin is 10%)."""


def state_cut(every: list[float]) -> float | None:
    """Where the machine's two speed states divide the launches of one engine and size, or None when
    they do not fall in two: the largest gap between the sorted values of every launch (all sides)
    must be at least :data:`STATE_GAP`. On this VM a launch of the same program lands in one of two
    speed states for d5pipe and the bare loop alike; within one state the sides are compared like
    with like. The cut is from every side's values together, so it favours none."""
    values = sorted(every)
    if len(values) < 4:
        return None
    gap, cut = max((b / a, (a * b) ** 0.5) for a, b in zip(values, values[1:]))
    return cut if gap >= STATE_GAP else None


def judged(bare: list[float], ours: list[float], policy: Any) -> tuple[Any, str]:
    """d5pipe's comparison of the launches' values (bare the baseline) and its CI as text; unpaired: a
    launch's speed does not carry over to the other side's launch of its round."""
    from d5pipe.results.timing_compare import compare_one

    c = compare_one("allreduce_time", "s", bare, ours, policy, paired=False)
    return c, f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]" if c.ci else "-"


def round_order(engines: list[str], sizes: list[int], rng: random.Random) -> list[tuple[str, int, str]]:
    """One round's launches: the (engine, size) blocks in random order, and within each block its
    sides back to back in random order, so that the launches compared with each other are adjacent
    in time (the machine's speed state, which holds for seconds, is then often shared)."""
    blocks = [(e, s) for e in engines for s in sizes]
    rng.shuffle(blocks)
    order = []
    for engine, size in blocks:
        sides = sides_of(engine)
        rng.shuffle(sides)
        order += [(engine, size, side) for side in sides]
    return order


def paired(bare: list[dict[str, Any] | None], ours: list[dict[str, Any] | None], cut: float | None = None) -> str:
    """The per-round ratios d5pipe / bare (rounds where both launches completed): their median, its 95%
    CI from order statistics (d5pipe.measure.stats.median_ci; a round whose two launches fell in
    different speed states is one outlying ratio, not a shifted mean) and the verdict at the margin.
    With ``cut`` (:func:`state_cut`), only the rounds whose two launches fell in the same state: the
    state changes within seconds, so rounds that straddle one are not rare, and a few more of them one
    way than the other shift the median of all rounds' ratios."""
    import numpy as np

    from d5pipe.measure.stats import median_ci

    pairs = [(float(np.median(b["times_s"])), float(np.median(d["times_s"])))
             for b, d in zip(bare, ours) if b is not None and d is not None]
    if cut is not None:
        pairs = [(b, d) for b, d in pairs if (b < cut) == (d < cut)]
    ratios = [d / b for b, d in pairs]
    label = "paired by round" if cut is None else "paired by round, both launches in one state"
    if len(ratios) < 2:
        return f"{label}: fewer than two rounds"
    ci, mid = median_ci(ratios), float(np.median(ratios))
    verdict = ("inconclusive (too few rounds for a 95% CI)" if not ci.exact else
               "equivalent" if ci.low >= 1 / (1 + MARGIN) and ci.high <= 1 + MARGIN else
               "slower" if ci.low > 1 else "faster" if ci.high < 1 else "inconclusive")
    return (f"{label} ({len(ratios)} rounds): median ratio {mid:.3f} [{ci.low:.3f}, {ci.high:.3f}] "
            f"({100 * ci.coverage:.1f}% CI) -> {verdict}; ratios from {min(ratios):.2f} to {max(ratios):.2f}")


def table(got: dict[tuple[str, int, str], list[dict[str, Any] | None]], engines: list[str], sizes: list[int]) -> None:
    """The comparison table and, per engine, placement and allocation."""
    import numpy as np

    from d5pipe.results.timing_compare import Policy

    print(f"{'engine':<26} {'size':>6} {'buffer':<7} {'d5pipe us':>10} {'bare us':>9} {'d5pipe/bare':>11} "
          f"{'95% CI':>16} {'verdict (10%)':>24}  {'d5pipe rounds [min, max] us':>27}  {'bare rounds [min, max] us':>25}")
    policy = Policy(margin=MARGIN)
    for engine in engines:
        for size in sizes:
            values = {sd: [float(np.median(r["times_s"])) for r in got.get((engine, size, sd), []) if r is not None]
                      for sd in sides_of(engine)}  # a launch's value: its median iteration
            cut = state_cut([v for vs in values.values() for v in vs])
            for side in [sd for sd in sides_of(engine) if sd.startswith("d5pipe")]:
                label = f"{size // 2**20} MiB" if size >= 2**20 else f"{size} B"
                base = baseline(side, got, engine, size)
                ds, bs = values[side], values[base]
                if len(ds) < 2 or len(bs) < 2:
                    print(f"{NAMES[engine]:<26} {label:>6} {side.split(':')[1]:<7} (fewer than two launches a side)")
                    continue
                c, ci = judged(bs, ds, policy)
                print(f"{NAMES[engine]:<26} {label:>6} {side.split(':')[1]:<7} {fmt_us(statistics.median(ds)):>10} "
                      f"{fmt_us(statistics.median(bs)):>9} {c.ratio or float('nan'):>11.3f} {ci:>16} {c.label():>24}  "
                      f"{'[' + fmt_us(min(ds)) + ', ' + fmt_us(max(ds)) + ']':>27}  "
                      f"{'[' + fmt_us(min(bs)) + ', ' + fmt_us(max(bs)) + ']':>25}")
                print(f"{'':<26}   {c.text()}")
                made = next((r["allocator"] for r in got[(engine, size, base)] if r is not None), "?")
                print(f"{'':<26}   against {base} ({made}); "
                      f"{paired(got[(engine, size, base)], got[(engine, size, side)])}")
                if cut is not None:
                    print(f"{'':<26}   {paired(got[(engine, size, base)], got[(engine, size, side)], cut)}")
                states = {} if cut is None else {
                    f"fast state (< {fmt_us(cut)} us)": ([d for d in ds if d < cut], [b for b in bs if b < cut]),
                    f"slow state (> {fmt_us(cut)} us)": ([d for d in ds if d > cut], [b for b in bs if b > cut])}
                for state, (d_in, b_in) in states.items():
                    if len(d_in) < 2 or len(b_in) < 2:
                        print(f"{'':<26}   {state}: {len(d_in)} d5pipe / {len(b_in)} bare launches (too few to compare)")
                        continue
                    cs, cis = judged(b_in, d_in, policy)
                    print(f"{'':<26}   {state}: {len(d_in)} d5pipe / {len(b_in)} bare launches, d5pipe "
                          f"{fmt_us(statistics.median(d_in))} us, bare {fmt_us(statistics.median(b_in))} us, "
                          f"ratio {cs.ratio or float('nan'):.3f} {cis} -> {cs.label()}")
    print("\nplacement and allocation (last completed round of each side):")
    for engine in engines:
        for size in sizes:
            for side in sides_of(engine):
                done = [r for r in got.get((engine, size, side), []) if r is not None]
                if done:
                    last = done[-1]
                    huge = last["huge_page_bytes"]
                    print(f"  {NAMES[engine]:<26} {size:>9} B {side:<14} binding={last['binding']}, "
                          f"rank CPUs {last['rank_cpus']}, {last['threads_per_rank']} thread(s)/rank, "
                          f"{pollers(last.get('polling_threads') or {})}; buffer "
                          f"{last['allocator']}, {'?' if huge is None else huge // 2**20} MiB on huge pages")


def replay(path: Path) -> int:
    """The tables of an earlier run, from its ``--json``."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    got: dict[tuple[str, int, str], list[dict[str, Any] | None]] = {}
    for run in raw["runs"]:
        got.setdefault((run["engine"], int(run["size"]), run["side"]), []).append(None if run.get("failed") else run)
    engines = [e for e in raw["args"]["engines"].split(",") if any(k[0] == e for k in got)]
    table(got, engines, sorted({k[1] for k in got}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="mpi,ddp,horovod", help="of mpi, ddp, horovod (unavailable ones are skipped)")
    ap.add_argument("--sizes", default=f"{2**20},{16 * 2**20}", help="message bytes, comma-separated")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100, help="timed iterations per launch")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="distributed.threads_per_rank (0: cores / ranks)")
    ap.add_argument("--bind", choices=("auto", "core", "none"), default="auto", help="distributed.bind of both sides")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0, help="of the random order of the runs")
    ap.add_argument("--json", help="write every launch's raw result here")
    ap.add_argument("--replay", help="print the tables of a run written by --json (nothing is launched)")
    a = ap.parse_args()
    if a.replay:
        return replay(Path(a.replay))
    # the ranks of the bare side import benchmarks.bare_collective from this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    engines = [e for e in a.engines.split(",") if available(e)]
    skipped = sorted(set(a.engines.split(",")) - set(engines))
    sizes = [int(s) for s in a.sizes.split(",")]
    rng = random.Random(a.seed)
    print(f"allreduce (sum, float32, in place) on {a.ranks} ranks, bind={a.bind}; {a.rounds} round(s), each a fresh "
          f"launch per (engine, size, side), the sides of each (engine, size) back to back, in random order; {a.warmup} warm-up + {a.steps} timed iterations per "
          f"launch; per iteration: barrier, own call, max over ranks; a launch's value is the median"
          + (f"; not available here: {', '.join(skipped)}" if skipped else ""))
    got: dict[tuple[str, int, str], list[dict[str, Any] | None]] = {
        (e, s, side): [] for e in engines for s in sizes for side in sides_of(e)}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for i, (engine, size, side) in enumerate(round_order(engines, sizes, rng)):
                res = run(side, engine, size, a, Path(tmp) / f"r{r}-{i}")
                got[(engine, size, side)].append(res)
                if res is not None:
                    import numpy as np

                    print(f"  [round {r + 1}/{a.rounds}, {time.perf_counter() - started:.0f} s] {engine} {size} "
                          f"{side}: {fmt_us(float(np.median(res['times_s'])))} us", file=sys.stderr, flush=True)
    print()
    table(got, engines, sizes)
    if a.json:
        raw = [{"engine": e, "size": s, "side": side, "round": i, **(res or {"failed": True})}
               for (e, s, side), runs in got.items() for i, res in enumerate(runs)]
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": raw}, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
