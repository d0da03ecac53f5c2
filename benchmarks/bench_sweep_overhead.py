"""Per-point and per-run overhead of a d5pipe sweep, next to its floor and two peers, in one run.

Trivial level-0 points (operator ``sum`` over (batch, size, size), exactly 10 timed samples, one
warm-up call, no checks, no peak; ``sweep_overhead/templates.py``), N = batch x size grid points.
Per round (the order of the variants is rotated every round), for each N:

* ``d5pipe``: ``d5pipe run`` with default settings (default sharding, 1 local job) into a fresh
  ``--out``: wall time / N.
* ``floor`` (a): the same points through ``d5pipe.levels.level0.point.run_point`` in one Python
  process, no records; the loop alone, after the imports (its first, cold point included, as in a shard).
* ``snakemake`` (b, peer): one Snakemake job per point, each a Python process that imports d5pipe,
  runs its point and writes a JSON record; ``--cores 2`` (2 jobs in parallel; d5pipe runs 1 job).
* ``hydra`` (c, peer): a ``@hydra.main`` app, ``--multirun`` with the basic (sequential) launcher,
  each job running the point in-process (torch imported once), writing a JSON record.

after a warm-up that is not measured, per round: ``--repeats`` times (default 3; each takes
seconds) the job start-up/exit cost of a shard job beyond ``import torch`` and the fixed per-run
cost of ``d5pipe run``; once a level-3 run (8 DDP points at 2 ranks, 300 timed steps each) and
``d5pipe plan`` of every shipped experiment; after the rounds, no-op re-runs of finished sweeps.
Every number printed is measured in this run; ratios are medians of per-round paired ratios with
an order-statistic CI (its coverage is printed: few rounds give [min, max]). Exit code 0 also
when a check fails.

Usage: python benchmarks/bench_sweep_overhead.py [--points 50,500,5000] [--rounds 3] [--repeats 3] [--skip-peers]
       [--noop-points 10000] [--quick] [--keep] [--timeout 3600]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "sweep_overhead"
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import templates as T  # noqa: E402

from d5pipe.measure.stats import median_ci  # noqa: E402

PY = sys.executable
D5 = [str(Path(PY).parent / "d5pipe")] if (Path(PY).parent / "d5pipe").exists() else [PY, "-m", "d5pipe.cli.main"]
ENV = {**os.environ, **T.THREAD_ENV}
PEER_MAX = 500
NAN = math.nan


class Failed(Exception):
    pass


def timed(cmd: list[str], timeout: float, stamps: list[tuple[float, str]] | None = None) -> tuple[float, str]:
    """Wall seconds of ``cmd`` (run from the repository root) and its output; Failed on exit != 0.
    With ``stamps``, each output line is appended with the seconds since the start it arrived at."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
    killer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if stamps is not None:
                stamps.append((time.perf_counter() - t0, line.rstrip()))
        proc.wait()
    finally:
        killer.cancel()
    dt = time.perf_counter() - t0
    out = "".join(lines)
    if proc.returncode != 0:
        why = f"timed out after {timeout:g} s" if dt >= timeout else f"exit {proc.returncode}"
        raise Failed(f"{why}: {' '.join(cmd[:5])} ...\n{out[-2000:]}")
    return dt, out


def records(run: Path, stage: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run / "points" / stage).glob("*.json"))]


def metric(rec: dict[str, Any], name: str) -> Any:
    return next((m["value"] for m in rec["metrics"] if m["name"] == name), None)


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp, self.conf = args, tmp, tmp / "conf"
        self.names = T.write_conf_dir(self.conf, [*args.points, *([args.noop_points] if args.noop_points else [])],
                                      not args.skip_l3)
        T.write_snakefile(tmp / "Snakefile", PY, HERE / "point_job.py")
        T.write_hydra_conf(tmp / "hydra_conf")
        self.res: dict[str, list[float]] = {}
        self.last_run: dict[int, Path] = {}
        self.l3_notes: list[str] = []

    def put(self, key: str, value: float) -> None:
        self.res.setdefault(key, []).append(value)

    def d5run(self, name: str, out: Path, *extra: str, stamps: list[tuple[float, str]] | None = None
              ) -> tuple[float, str]:
        cmd = [*D5, "run", name, "--config-dir", str(self.conf), "--out", str(out), *extra]
        return timed(cmd, self.args.timeout, stamps)

    # ---- the per-N variants -------------------------------------------------------------------
    def d5pipe(self, n: int, r: int) -> str:
        out = self.tmp / f"run-{n}-{r}"
        dt, _ = self.d5run(self.names[n], out)
        recs = records(out, "level0")
        ten = sum(metric(x, "n_samples") == T.SAMPLES for x in recs)
        old = self.last_run.pop(n, None)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.last_run[n] = out
        self.put(f"d5pipe/{n}", 1e3 * dt / n)
        shards = len(list((out / "plan" / "level0").glob("s*.json")))
        return f"{dt:.3f} s wall, {1e3 * dt / n:.3f} ms/point ({shards} shard job(s); {len(recs)} records, {ten} with 10 samples)"

    def floor(self, n: int, r: int) -> str:
        _, out = timed([PY, str(HERE / "point_job.py"), "floor", str(n), str(self.tmp / f"floor-{n}-{r}")],
                       self.args.timeout)
        got = json.loads(out.strip().splitlines()[-1])
        self.put(f"floor/{n}", 1e3 * got["seconds"] / n)
        return f"{got['seconds']:.3f} s loop, {1e3 * got['seconds'] / n:.3f} ms/point ({got['ten_samples']} with 10 samples)"

    def snakemake(self, n: int, r: int) -> str:
        work = self.tmp / f"smk-{n}-{r}"
        dt, _ = timed(T.snakemake_cmd(PY, self.tmp / "Snakefile", work, n), self.args.timeout)
        done = len(list((work / "out").glob("*.json")))
        shutil.rmtree(work, ignore_errors=True)
        self.put(f"snakemake/{n}", 1e3 * dt / n)
        return f"{dt:.3f} s wall, {1e3 * dt / n:.3f} ms/point ({done} records)"

    def hydra(self, n: int, r: int) -> str:
        sweep = self.tmp / f"hydra-{n}-{r}"
        dt, _ = timed(T.hydra_cmd(PY, HERE / "hydra_app.py", self.tmp / "hydra_conf", sweep, n), self.args.timeout)
        done = len(list(sweep.glob("*/record.json")))
        shutil.rmtree(sweep, ignore_errors=True)
        self.put(f"hydra/{n}", 1e3 * dt / n)
        return f"{dt:.3f} s wall, {1e3 * dt / n:.3f} ms/point ({done} records)"

    # ---- per round, outside the per-N variants ---------------------------------------------------
    def startup(self, r: int, i: int = 0) -> str:
        run = self.tmp / f"shard-{r}-{i}"
        self.d5run(self.names[1], run, "--dry-run")  # writes the plan; not timed
        torch_cmd = [PY, "-c", "import torch"]
        shard_cmd = [PY, "-m", "d5pipe.execute.shard", str(run), "level0", "s00000"]
        if (r + i) % 2:
            t_shard, _ = timed(shard_cmd, self.args.timeout)
            t_torch, _ = timed(torch_cmd, self.args.timeout)
        else:
            t_torch, _ = timed(torch_cmd, self.args.timeout)
            t_shard, _ = timed(shard_cmd, self.args.timeout)
        (rec,) = records(run, "level0")
        dur = float(rec["provenance"]["duration_s"])
        self.put("shard_s", t_shard)
        self.put("startup_s", t_shard - dur - t_torch)
        return (f"shard job {t_shard:.3f} s - point {dur:.4f} s - import torch {t_torch:.3f} s "
                f"= {t_shard - dur - t_torch:.3f} s")

    def fixed(self, r: int, i: int = 0) -> str:
        stamps: list[tuple[float, str]] = []
        dt, _ = self.d5run(self.names[1], self.tmp / f"one-{r}-{i}", stamps=stamps)
        self.put("run1_s", dt)
        at = {key: next((t for t, line in stamps if pat in line), NAN)
              for key, pat in (("plan", "points ("), ("level0", "level0 done"), ("report", "report done"),
                               ("snakemake", "d5pipe: done in"))}
        return (f"d5pipe run of 1 point {dt:.3f} s wall; its output lines arrived at: planned {at['plan']:.3f} s, "
                f"level0 job done {at['level0']:.3f} s, report job done {at['report']:.3f} s, "
                f"Snakemake over and sealed {at['snakemake']:.3f} s, exit {dt:.3f} s")

    def level3(self, r: int) -> str:
        out = self.tmp / f"l3-{r}"
        dt, _ = self.d5run("ovhl3", out)
        recs = sorted(records(out, "level3"), key=lambda x: x["provenance"]["started"])
        durs = [float(x["provenance"]["duration_s"]) for x in recs]
        launch = [float((x.get("extra", {}).get("launch") or {}).get("launch_s") or 0.0) for x in recs]
        own = [d - s for d, s in zip(durs, launch)]  # a point's time without waiting for its ranks to start
        steps = [float(metric(x, "time_per_step_s")) * len(x["samples"].get("step_time_max_s") or [0] * T.L3_STEPS)
                 for x in recs]
        self.put("l3_wall", dt)
        self.put("l3_vs_work", dt / sum(own))
        self.put("l3_vs_steps", dt / sum(steps))
        shutil.rmtree(out, ignore_errors=True)
        rest = statistics.median(durs[1:]) if len(durs) > 1 else NAN
        return (f"{len(recs)} points, wall {dt:.3f} s; the points' own work {sum(own):.3f} s (record durations "
                f"{sum(durs):.3f} s minus {sum(launch):.3f} s waiting for the ranks to launch; first point "
                f"{durs[0]:.3f} s, median of the others {rest:.3f} s); sum of timed steps {sum(steps):.3f} s; "
                f"wall/work {dt / sum(own):.2f}, wall/steps {dt / sum(steps):.2f}")

    def plan(self, exp: str, r: int) -> str:
        dt, _ = timed([*D5, "plan", exp, "--out", str(self.tmp / "no-such-run" / exp)], self.args.timeout)
        self.put(f"plan/{exp}", dt)
        return f"{dt:.3f} s"

    # ---- rounds ---------------------------------------------------------------------------------
    def tasks(self) -> list[tuple[str, Callable[[int], str], tuple[str, ...]]]:
        """(label, run(round), the series it adds one value to)."""
        a = self.args
        out: list[tuple[str, Callable[[int], str], tuple[str, ...]]] = []
        for n in a.points:
            out.append((f"d5pipe N={n}", partial(self.d5pipe, n), (f"d5pipe/{n}",)))
            out.append((f"floor N={n}", partial(self.floor, n), (f"floor/{n}",)))
            if not a.skip_peers and n <= PEER_MAX:
                out.append((f"snakemake 1 job/point N={n}", partial(self.snakemake, n), (f"snakemake/{n}",)))
                out.append((f"hydra multirun N={n}", partial(self.hydra, n), (f"hydra/{n}",)))
        for i in range(a.repeats):  # cheap: several paired values per round
            out += [(f"shard job start-up ({i + 1}/{a.repeats})", partial(self.startup, i=i),
                     ("shard_s", "startup_s")),
                    (f"1-point d5pipe run ({i + 1}/{a.repeats})", partial(self.fixed, i=i), ("run1_s",))]
        if not a.skip_l3:
            out.append(("level 3, 8 DDP points x 2 ranks", self.level3, ("l3_wall", "l3_vs_work", "l3_vs_steps")))
        for exp in sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")):
            out.append((f"d5pipe plan {exp}", partial(self.plan, exp), (f"plan/{exp}",)))
        return out

    def attempt(self, label: str, fn: Callable[[], str], keys: tuple[str, ...]) -> None:
        """Run one measurement, which adds one value to each of its series; a failed one adds NaN
        instead, so that the series stay paired."""
        before = {key: len(self.res.get(key, [])) for key in keys}
        try:
            print(f"  {label}: {fn()}", flush=True)
        except Failed as exc:
            print(f"  {label}: FAILED ({exc})", flush=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a record without the metric read; go on
            print(f"  {label}: FAILED ({type(exc).__name__}: {exc})", flush=True)
        for key in keys:
            values = self.res.setdefault(key, [])
            values += [NAN] * (before[key] + 1 - len(values))

    def warm_up(self) -> None:
        """Not measured: one 1-point d5pipe run and one peer job, so that the first measured round
        does not pay for reading torch, Snakemake and Hydra from a cold disk cache (after a big
        install, a first ``import torch`` here takes seconds more than the next)."""
        t0 = time.perf_counter()
        self.d5run(self.names[1], self.tmp / "warm-up")
        shutil.rmtree(self.tmp / "warm-up", ignore_errors=True)
        if not self.args.skip_peers:
            timed(T.snakemake_cmd(PY, self.tmp / "Snakefile", self.tmp / "warm-up-smk", 1), self.args.timeout)
            timed(T.hydra_cmd(PY, HERE / "hydra_app.py", self.tmp / "hydra_conf", self.tmp / "warm-up-hydra", 1),
                  self.args.timeout)
            for name in ("warm-up-smk", "warm-up-hydra"):
                shutil.rmtree(self.tmp / name, ignore_errors=True)
        print(f"warm-up (not measured): {time.perf_counter() - t0:.1f} s", flush=True)

    def rounds(self) -> None:
        tasks = self.tasks()
        self.warm_up()
        for r in range(self.args.rounds):
            k = r % len(tasks)
            print(f"round {r + 1}/{self.args.rounds}", flush=True)
            for label, fn, keys in tasks[k:] + tasks[:k]:
                self.attempt(label, partial(fn, r), keys)

    def noop(self) -> None:
        print("no-op re-runs (every point has its record, results up to date)", flush=True)
        if self.last_run:
            n = max(self.last_run)
            for r in range(self.args.rounds):
                self.attempt(f"d5pipe run into the finished {n}-point --out, {r + 1}",
                             partial(self._noop_d5, n, self.last_run[n], f"noop/{n}"), (f"noop/{n}",))
        m = self.args.noop_points
        if not m:
            return
        out = self.tmp / f"noop-{m}"
        try:
            dt, _ = self.d5run(self.names[m], out)
            print(f"  built the {m}-point sweep once: {dt:.3f} s", flush=True)
        except Failed as exc:
            print(f"  building the {m}-point sweep FAILED ({exc})", flush=True)
            return
        smk = self.tmp / f"smk-noop-{m}"
        T.touch_finished(smk, m)  # the outputs of m one-point jobs, written directly, not by running m jobs
        for r in range(self.args.rounds):
            pair = [(f"d5pipe no-op re-run, {m} points, {r + 1}", lambda: self._noop_d5(m, out, f"noop/{m}"),
                     f"noop/{m}"),
                    (f"snakemake no-op over {m} finished one-point jobs, {r + 1}", lambda: self._noop_smk(m, smk),
                     f"smk_noop/{m}")]
            for label, fn, key in pair[r % 2:] + pair[:r % 2]:
                self.attempt(label, fn, (key,))

    def _noop_d5(self, n: int, out: Path, key: str) -> str:
        dt, text = self.d5run(self.names[n], out)
        self.put(key, dt)
        said = "nothing to do" in text
        return f"{dt:.3f} s" + ("" if said else " (d5pipe did NOT say 'nothing to do')")

    def _noop_smk(self, m: int, work: Path) -> str:
        dt, text = timed(T.snakemake_cmd(PY, self.tmp / "Snakefile", work, m), self.args.timeout)
        self.put(f"smk_noop/{m}", dt)
        return f"{dt:.3f} s" + ("" if "Nothing to be done" in text else " (Snakemake ran jobs)")


def med(xs: list[float] | None) -> float:
    xs = [x for x in (xs or []) if not math.isnan(x)]
    return statistics.median(xs) if xs else NAN


def paired(a: list[float] | None, b: list[float] | None) -> str:
    """Median of per-round ratios a/b with its order-statistic CI and coverage."""
    ratios = [x / y for x, y in zip(a or [], b or []) if not (math.isnan(x) or math.isnan(y)) and y > 0]
    if not ratios:
        return "n/a"
    if len(ratios) < 2:
        return f"{ratios[0]:.3f} (1 round)"
    ci = median_ci(ratios)
    return f"{statistics.median(ratios):.3f} (CI {ci.low:.3f}..{ci.high:.3f}, {100 * ci.coverage:.0f}%)"


def verdict(ok: bool | None) -> str:
    return "n/a " if ok is None else ("PASS" if ok else "FAIL")


def summary(b: Bench) -> None:
    res, a = b.res, b.args
    print("\nsummary (medians over rounds; ratios: median of per-round ratios, CI coverage in %)")
    print(f"{'N':>6} {'d5pipe ms/pt':>13} {'floor ms/pt':>12} {'smk ms/pt':>10} {'hydra ms/pt':>12}  "
          "d5pipe/floor | snakemake/d5pipe | hydra/d5pipe")
    for n in a.points:
        d, f, s, h = (med(res.get(f"{k}/{n}")) for k in ("d5pipe", "floor", "snakemake", "hydra"))
        print(f"{n:>6} {d:>13.3f} {f:>12.3f} {s:>10.3f} {h:>12.3f}  {paired(res.get(f'd5pipe/{n}'), res.get(f'floor/{n}'))}"
              f" | {paired(res.get(f'snakemake/{n}'), res.get(f'd5pipe/{n}'))}"
              f" | {paired(res.get(f'hydra/{n}'), res.get(f'd5pipe/{n}'))}")
    if a.skip_peers:
        print("  peers skipped (--skip-peers)")
    elif any(n > PEER_MAX for n in a.points):
        print(f"  peers not run above {PEER_MAX} points (one process per point would take too long)")
    print("checks:")

    def check(ok: bool | None, text: str) -> None:
        print(f"  {verdict(ok)} {text}")

    def known(*xs: float) -> bool:
        return not any(math.isnan(x) for x in xs)

    if 5000 in a.points:
        d, f = med(res.get("d5pipe/5000")), med(res.get("floor/5000"))
        check(d <= 2 * f + 1 if known(d, f) else None,
              f"5000 points: d5pipe {d:.3f} ms/point <= 2 x floor {f:.3f} + 1 = {2 * f + 1:.3f} ms/point")
    else:
        check(None, "5000 points: d5pipe <= 2 x floor + 1 ms/point (not measured: 5000 not in --points)")
    for n in (50, 500):
        d, s, h = (med(res.get(f"{k}/{n}")) for k in ("d5pipe", "snakemake", "hydra"))
        if n not in a.points or a.skip_peers:
            check(None, f"{n} points: d5pipe cheaper than Hydra and >= 10x cheaper than Snakemake (not measured)")
            continue
        check(d < h if known(d, h) else None, f"{n} points: d5pipe {d:.3f} < Hydra basic launcher {h:.3f} ms/point")
        check(s >= 10 * d if known(d, s) else None,
              f"{n} points: Snakemake 1 job/point {s:.3f} >= 10 x d5pipe {d:.3f} ms/point (ratio {s / d:.2f})")
    st = med(res.get("startup_s"))
    check(st <= 1 if known(st) else None, f"shard job start-up/exit beyond import torch {st:.3f} s <= 1 s "
          f"(shard job {med(res.get('shard_s')):.3f} s)")
    fixed = [x - y for x, y in zip(res.get("run1_s", []), res.get("shard_s", []))]
    fx = med(fixed)
    check(fx <= 3 if known(fx) else None, f"fixed per-run cost {fx:.3f} s <= 3 s (1-point d5pipe run "
          f"{med(res.get('run1_s')):.3f} s minus its shard job alone, paired per measurement)")
    if a.skip_l3:
        check(None, "level 3 wall <= 3 x its points' own work (skipped)")
    else:
        lw, ld, ls = med(res.get("l3_wall")), med(res.get("l3_vs_work")), med(res.get("l3_vs_steps"))
        check(ld <= 3 if known(ld) else None,
              f"level 3: wall {lw:.3f} s is {ld:.2f} x the points' own work (<= 3; record durations without "
              f"the wait for the ranks' launch); {ls:.2f} x the sum of their timed steps")
    plans = {k[5:]: med(v) for k, v in res.items() if k.startswith("plan/")}
    worst = max(plans.values(), default=NAN)
    check(worst <= 1.5 if known(worst) else None,
          "d5pipe plan of every shipped experiment <= 1.5 s: " + ", ".join(f"{e} {t:.3f} s" for e, t in plans.items()))
    for key in sorted((k for k in res if k.startswith("noop/")), key=lambda k: int(k[5:])):
        t = med(res[key])
        smk = res.get(f"smk_noop/{key[5:]}")
        extra = f"; Snakemake's own no-op over {key[5:]} finished jobs {med(smk):.3f} s" if smk else ""
        check(t <= 2 if known(t) else None, f"no-op re-run of {key[5:]} finished points {t:.3f} s <= 2 s{extra}")
    if not any(k.startswith("noop/10000") for k in res):
        print("  (the task's no-op check is for 10,000 points: --noop-points 10000)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="50,500,5000", help="comma-separated N")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3,
                    help="start-up and 1-point-run measurements per round (each a few seconds)")
    ap.add_argument("--skip-peers", action="store_true", help="no Snakemake/Hydra peers")
    ap.add_argument("--skip-l3", action="store_true", help="no level-3 run")
    ap.add_argument("--noop-points", type=int, default=0, help="also time no-op re-runs of a sweep of this size")
    ap.add_argument("--quick", action="store_true", help="N=50, 1 round, no level 3 (a smoke test)")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    ap.add_argument("--timeout", type=float, default=3600, help="limit of one command (s)")
    args = ap.parse_args()
    args.points = [int(x) for x in args.points.split(",")]
    if args.quick:
        args.points, args.rounds, args.skip_l3 = [50], 1, True
    tmp = Path(tempfile.mkdtemp(prefix="d5ovh-"))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), points {args.points}, {args.rounds} round(s), "
          f"threads per process {T.THREAD_ENV['OMP_NUM_THREADS']}, timer {T.TIMER}; temp {tmp}", flush=True)
    t0 = time.perf_counter()
    bench = Bench(args, tmp)
    try:
        bench.rounds()
        bench.noop()
        summary(bench)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"benchmark wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
