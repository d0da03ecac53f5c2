"""Sweeps of many shards on a SLURM sandbox of many nodes: what d5pipe's driver costs, how hard it
leans on the scheduler, and whether every point ran exactly once -- beside a peer, in one run.

For each sweep size S (shards; ``--points-per-shard`` P trivial level-0 points each, operator ``sum``,
10 timed samples: ``sweep_overhead/templates.py``):

* ``d5pipe``: ``d5pipe run`` with ``--executor slurm`` on the sandbox (``scripts/slurm_sandbox.py``,
  started here with ``--nodes`` and the site limits given, unless ``--slurm-conf`` names a running
  cluster). Every SLURM client command is wrapped on ``PATH`` (a shim that logs the call, its
  caller and its exit code): the calls per minute of each command, the scheduler queries
  (``squeue``, ``sacct``, ``sinfo``, ``sacctmgr``, ``scontrol show``) per minute, split into the
  driver's and the jobs'; rejected submissions (``sbatch`` exiting non-zero).
* wall time; the floor: the shards' own run time (sacct's Elapsed of every task, summed) over the
  slots (``--jobs`` or the cluster's CPUs, whichever is fewer); the driver's overhead per shard:
  (wall - floor) / S; Snakemake's DAG build and walk for the run (``snakemake --dry-run --forceall``
  on the run directory); the driver's peak RSS and CPU seconds (``wait4``: ``d5pipe run`` and every
  process it waited for, Snakemake included; the jobs run under slurmd and are not in it);
* every point's count of executions (``shards/<stage>/*.attempts``): must be exactly 1.
* ``--peers``: at the largest S (or ``--peers-at``), the same S shards of the same P points as plain Snakemake with
  snakemake-executor-plugin-slurm, one SLURM job per shard (what a user of the plugin writes), and
  Hydra's submitit launcher (one array of the whole sweep) where ``hydra_plugins.hydra_submitit_launcher``
  is installed: wall time, scheduler calls per minute and rejected submissions, side by side.

Needs root (the sandbox) and Debian's Slurm. Usage:
  python benchmarks/bench_slurm_scale.py [--nodes 128] [--cpus-per-node 4] [--shards 500,1000,2000]
      [--points-per-shard 10] [--max-array-size 1001] [--max-job-count 1500] [--jobs 256] [--peers]
      [--slurm-conf PATH] [--keep]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "sweep_overhead"))

from templates import OPERATORS, THREAD_ENV, TIMER, _flow  # noqa: E402

COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "sinfo", "sacctmgr", "srun", "scancel")
QUERIES = ("squeue", "sacct", "sinfo", "sacctmgr")
"""Read-only scheduler queries (``scontrol show ...`` counts too; ``scontrol update`` does not)."""
SHIM = """#!/bin/bash
"{real}" "$@"
rc=$?
printf '%s\\t%s\\t%s\\t%s\\t%s\\n' "$(date +%s.%N)" "{name}" "$rc" "$*" \
  "$(tr '\\0' ' ' < /proc/$PPID/cmdline 2>/dev/null | cut -c1-200)" >> "$D5_CALLS_LOG"
exit $rc
"""
JOB_MARKERS = ("d5pipe.execute.jobs", "d5pipe.execute.snakemake_job", "slurmstepd", "slurm_script",
               "point_job.py", "submitit")


def write_shims(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = shutil.which(name)
        if real is None:
            continue
        (bin_dir / name).write_text(SHIM.format(real=real, name=name))
        (bin_dir / name).chmod(0o755)


def read_calls(log: Path) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    if not log.exists():
        return calls
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 5:
            calls.append({"t": float(parts[0]), "cmd": parts[1], "rc": int(parts[2] or 0), "args": parts[3],
                          "caller": parts[4]})
    return calls


def is_query(call: dict[str, Any]) -> bool:
    return call["cmd"] in QUERIES or (call["cmd"] == "scontrol" and call["args"].startswith("show"))


def call_summary(calls: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    minutes = max(wall_s, 1e-9) / 60
    in_jobs = [c for c in calls if any(m in c["caller"] for m in JOB_MARKERS)]
    driver = [c for c in calls if c not in in_jobs]
    per_cmd = Counter(c["cmd"] for c in calls)
    return {
        "per_min": {cmd: round(per_cmd[cmd] / minutes, 2) for cmd in COMMANDS if per_cmd[cmd]},
        "counts": dict(per_cmd),
        "queries": sum(map(is_query, calls)),
        "queries_per_min": round(sum(map(is_query, calls)) / minutes, 2),
        "queries_driver": sum(map(is_query, driver)),
        "queries_jobs": sum(map(is_query, in_jobs)),
        "sbatch": per_cmd["sbatch"],
        "rejected": sum(1 for c in calls if c["cmd"] == "sbatch" and c["rc"] != 0),
    }


TRAIN_SHARE = 20
"""One shard in this many is the second stage's (level 2: a tiny MLP trained one epoch)."""


def experiment(shards: int, per_shard: int) -> str:
    """Two stages of ``shards`` shards of ``per_shard`` points: level 0 (operator ``sum`` over sizes
    x batches) and level 2 (one in :data:`TRAIN_SHARE` of the shards: learning rates)."""
    train = max(1, shards // TRAIN_SHARE)
    sizes = list(range(1, shards - train + 1))
    batches = list(range(1, per_shard + 1))
    lrs = [round(1e-4 * (k + 1), 6) for k in range(train * per_shard)]
    return (f"# @package _global_\nname: slurm_scale\nseed: 5\nstages: [level0, level2]\nrepetitions: 1\n"
            f"shards: {{points_per_shard: {per_shard}, max_jobs_per_stage: 0}}\n"
            f"timer: {_flow(TIMER)}\noperators: {_flow(OPERATORS)}\n"
            "model: {name: mlp, hidden: [8]}\n"
            "dataset: {name: synthetic, n_samples: 64, image_shape: [], n_features: 8, n_classes: 2}\n"
            "train: {peak: false, optimizer: sgd, lr: 0.05, epochs: 1, batch_size: 32, target_accuracy: null}\n"
            f"sweep:\n  grid:\n    operators.size: {sizes}\n    operators.batch: {batches}\n"
            f"    train.lr: {lrs}\n")


def run_timed(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """Run ``argv``: its exit code, wall seconds and output."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += f"\n(killed after {timeout_s} s)"
        timed_out = True
    else:
        timed_out = False
    return {"rc": proc.returncode, "wall_s": time.monotonic() - t0, "out": out, "timed_out": timed_out}


def cancel_all(env: dict[str, str]) -> None:
    """Cancel whatever a peer left in the sandbox (a peer stopped at its timeout leaves its jobs
    running) and wait until slurmctld has none running: the next measurement starts on idle nodes
    (the benchmark's own calls: not counted)."""
    env = {k: v for k, v in env.items() if k != "D5_CALLS_LOG"}
    subprocess.run(["scancel", "-u", getpass.getuser()], env=env, capture_output=True, timeout=120, check=False)
    for _ in range(120):
        out = subprocess.run(["squeue", "-h", "-t", "PD,R,CG", "-o", "%i"], env=env, capture_output=True,
                             text=True, timeout=60, check=False).stdout
        if not out.strip():
            return
        time.sleep(2)


class ChildUsage:
    """CPU seconds and peak RSS of children waited for between :meth:`start` and :meth:`stop`."""

    def start(self) -> None:
        import resource

        self.before = resource.getrusage(resource.RUSAGE_CHILDREN)

    def stop(self) -> tuple[float, float]:
        import resource

        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (now.ru_utime + now.ru_stime) - (self.before.ru_utime + self.before.ru_stime)
        return cpu, now.ru_maxrss / 1024  # ru_maxrss: the largest child so far (KB)


def sacct_elapsed(run_dir: Path, env: dict[str, str], since: str) -> list[float]:
    """sacct's Elapsed (s) of every job and array task whose working directory is ``run_dir``
    (the benchmark's own query: not counted among the run's calls)."""
    env = {k: v for k, v in env.items() if k != "D5_CALLS_LOG"}
    proc = subprocess.run(["sacct", "-n", "-P", "-X", "-a", "-S", since, "-o", "JobID,Elapsed,WorkDir"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    out = []
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and os.path.realpath(parts[2]) == os.path.realpath(run_dir):
            h, m, s = (parts[1].split("-")[-1].split(":") + ["0", "0"])[:3]
            days = int(parts[1].split("-")[0]) if "-" in parts[1] else 0
            out.append(days * 86400 + int(h) * 3600 + int(m) * 60 + float(s))
    return out


def executions(run_dir: Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    for path in (run_dir / "shards").glob("*/*.attempts"):
        seen.update(line.strip() for line in path.read_text().splitlines() if line.strip())
    return seen


def planned(run_dir: Path) -> set[str]:
    from d5pipe.rundir.layout import RunDir

    return {pid for ids in RunDir(run_dir).planned_ids.values() for pid in ids}


def dag_seconds(run_dir: Path, env: dict[str, str]) -> float:
    """Snakemake's DAG build and walk for the run (a dry run after it; its calls are not the run's)."""
    env = {k: v for k, v in env.items() if k != "D5_CALLS_LOG"}
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory",
                    str(run_dir), "--dry-run", "--forceall", "--quiet", "all", "--cores", "1"], env=env,
                   capture_output=True, text=True, timeout=3600, check=False)
    return time.monotonic() - t0


def d5pipe_sweep(shards: int, args: argparse.Namespace, work: Path, env: dict[str, str], slots: int) -> dict[str, Any]:
    conf = work / f"conf{shards}"
    (conf / "experiment").mkdir(parents=True, exist_ok=True)
    (conf / "experiment" / "slurm_scale.yaml").write_text(experiment(shards, args.points_per_shard))
    run_dir = work / f"run{shards}"
    log = work / f"calls-d5pipe-{shards}.log"
    env = {**env, "D5_CALLS_LOG": str(log)}
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "slurm_scale", "--config-dir", str(conf), "--out",
            str(run_dir), "--executor", "slurm", "--jobs", str(args.jobs), "executor.resources.default.runtime_min=30",
            "executor.resources.default.mem_mb=200", "executor.retries=0", f"executor.poll_s={args.poll_s}"]
    usage = ChildUsage()
    usage.start()
    res = run_timed(argv, env, ROOT, args.timeout)
    cpu_s, rss_mb = usage.stop()
    elapsed = sacct_elapsed(run_dir, env, since)
    floor = sum(elapsed) / max(1, slots)
    counts = executions(run_dir)
    ids = planned(run_dir) if (run_dir / "plan").exists() else set()
    once = bool(ids) and all(counts.get(i, 0) == 1 for i in ids) and set(counts) <= ids
    return {"shards": shards, "points": len(ids), "rc": res["rc"], "wall_s": res["wall_s"], "floor_s": floor,
            "tasks_in_sacct": len(elapsed), "overhead_per_shard_s": (res["wall_s"] - floor) / shards,
            "dag_s": dag_seconds(run_dir, env), "driver_cpu_s": cpu_s, "driver_peak_rss_mb": rss_mb,
            "exactly_once": once, "max_executions": max(counts.values(), default=0),
            "missing": len(ids - set(counts)), "calls": call_summary(read_calls(log), res["wall_s"]),
            "tail": res["out"][-1500:] if res["rc"] != 0 else ""}


PEER_SNAKEFILE = """
S = int(config["shards"])
rule all:
    input: expand("done/{{i}}.json", i=range(S))
rule shard:
    output: "done/{{i}}.json"
    resources: runtime=30, mem_mb=200
    shell: "{python} {point_job} floor {per_shard} work/{{wildcards.i}} > {{output}}"
"""


def snakemake_peer(shards: int, args: argparse.Namespace, work: Path, env: dict[str, str],
                   timeout_s: float) -> dict[str, Any]:
    """Plain Snakemake + snakemake-executor-plugin-slurm, one SLURM job per shard (its defaults)."""
    d = work / f"peer-snakemake-{shards}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "Snakefile").write_text(PEER_SNAKEFILE.format(python=sys.executable, per_shard=args.points_per_shard,
                                                       point_job=HERE / "sweep_overhead" / "point_job.py"))
    log = work / f"calls-snakemake-{shards}.log"
    argv = [sys.executable, "-m", "snakemake", "--executor", "slurm", "--jobs", str(args.jobs), "--config",
            f"shards={shards}", "--latency-wait", "5", "--slurm-init-seconds-before-status-checks", "10"]
    res = run_timed(argv, {**env, **THREAD_ENV, "D5_CALLS_LOG": str(log)}, d, timeout_s)
    cancel_all(env)
    return {"rc": res["rc"], "wall_s": res["wall_s"], "calls": call_summary(read_calls(log), res["wall_s"]),
            "done": len(list((d / "done").glob("*"))), "timed_out": res["timed_out"],
            "tail": res["out"][-800:] if res["rc"] != 0 else ""}


HYDRA_APP = """
import subprocess, sys
import hydra
from omegaconf import DictConfig

@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg: DictConfig) -> None:
    subprocess.run([sys.executable, "{point_job}", "floor", "{per_shard}", f"work/{{cfg.shard}}"], check=True)
    open(f"{done}/{{cfg.shard}}", "w").close()

if __name__ == "__main__":
    main()
"""


def submitit_peer(shards: int, args: argparse.Namespace, work: Path, env: dict[str, str],
                  timeout_s: float) -> dict[str, Any]:
    """Hydra's submitit launcher: ``--multirun`` of the shards, one array for the whole sweep."""
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return {"skipped": "hydra-submitit-launcher is not installed (pip install hydra-submitit-launcher)"}
    d = work / f"peer-submitit-{shards}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "done").mkdir(exist_ok=True)
    (d / "app.py").write_text(HYDRA_APP.format(point_job=HERE / "sweep_overhead" / "point_job.py",
                                               per_shard=args.points_per_shard, done=d / "done"))
    (d / "config.yaml").write_text("shard: 0\ndefaults:\n  - override hydra/launcher: submitit_slurm\n")
    log = work / f"calls-submitit-{shards}.log"
    argv = [sys.executable, "app.py", "--multirun", f"shard=range(0,{shards})",
            f"hydra.launcher.array_parallelism={args.jobs}", "hydra.launcher.timeout_min=30",
            "hydra.launcher.mem_gb=1"]
    res = run_timed(argv, {**env, **THREAD_ENV, "D5_CALLS_LOG": str(log)}, d, timeout_s)
    cancel_all(env)
    return {"rc": res["rc"], "wall_s": res["wall_s"], "calls": call_summary(read_calls(log), res["wall_s"]),
            "done": len(list((d / "done").glob("*"))), "timed_out": res["timed_out"],
            "tail": res["out"][-800:] if res["rc"] != 0 else ""}


def sandbox(args: argparse.Namespace, state: Path) -> tuple[dict[str, str], int]:
    """Start the sandbox (or use ``--slurm-conf``); the environment for its clients and its CPUs."""
    env = dict(os.environ)
    if args.slurm_conf:
        env["SLURM_CONF"] = str(args.slurm_conf)
    else:
        cmd = [sys.executable, str(ROOT / "scripts" / "slurm_sandbox.py"), "up", str(state), "--nodes",
               str(args.nodes), "--cpus-per-node", str(args.cpus_per_node), "--max-array-size",
               str(args.max_array_size), "--max-job-count", str(args.max_job_count), "--min-job-age",
               str(args.min_job_age), "--install-etc-conf"]
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, timeout=1800)
        print(f"sandbox: {args.nodes} nodes up in {time.monotonic() - t0:.0f} s", flush=True)
        env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    out = subprocess.run(["sinfo", "-h", "-o", "%C"], env=env, capture_output=True, text=True, check=False).stdout
    total = int(out.strip().split("/")[-1]) if out.strip() else args.nodes * args.cpus_per_node
    return env, total


def print_d5pipe(d: dict[str, Any], slots: int) -> None:
    c = d["calls"]
    print(f"\n== {d['shards']} shards, {d['points']} points (exit {d['rc']})\n"
          f"  wall {d['wall_s']:.0f} s; floor {d['floor_s']:.0f} s ({d['tasks_in_sacct']} tasks in sacct over "
          f"{slots} slots); driver overhead {d['overhead_per_shard_s']:.3f} s/shard\n"
          f"  Snakemake DAG build+walk (dry run, all jobs) {d['dag_s']:.1f} s; driver peak RSS "
          f"{d['driver_peak_rss_mb']:.0f} MB, CPU {d['driver_cpu_s']:.0f} s\n"
          f"  scheduler queries {c['queries']} ({c['queries_per_min']}/min: driver {c['queries_driver']}, "
          f"jobs {c['queries_jobs']}); sbatch {c['sbatch']}, rejected {c['rejected']}; per minute {c['per_min']}\n"
          f"  executions per point: exactly once {d['exactly_once']} (max {d['max_executions']}, "
          f"missing {d['missing']})", flush=True)
    if d["tail"]:
        print(d["tail"])


def print_peer(peer: str, p: dict[str, Any], shards: int) -> None:
    if "skipped" in p:
        print(f"  peer {peer}: skipped: {p['skipped']}", flush=True)
        return
    pc = p["calls"]
    end = (f"stopped unfinished at {p['wall_s']:.0f} s" if p["timed_out"]
           else f"exit {p['rc']}, wall {p['wall_s']:.0f} s")
    pace = 60.0 * p["done"] / p["wall_s"] if p["wall_s"] > 0 else 0.0
    print(f"  peer {peer}: {end}, {p['done']} of {shards} shards done ({pace:.1f} a minute), scheduler queries "
          f"{pc['queries']} ({pc['queries_per_min']}/min), sbatch {pc['sbatch']}, rejected {pc['rejected']}",
          flush=True)
    if p.get("tail"):
        print(f"    why: {p['tail'].strip().splitlines()[-1]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--cpus-per-node", type=int, default=4)
    ap.add_argument("--shards", default="500,1000,2000")
    ap.add_argument("--points-per-shard", type=int, default=10)
    ap.add_argument("--max-array-size", type=int, default=1001)
    ap.add_argument("--max-job-count", type=int, default=400)
    ap.add_argument("--min-job-age", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=20, help="tasks in flight (d5pipe --jobs, the peers' --jobs)")
    ap.add_argument("--poll-s", type=float, default=10.0)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--peers-at", type=int, default=0, help="the sweep size the peers run at (default: the largest)")
    ap.add_argument("--peer-timeout-factor", type=float, default=1.5,
                    help="a peer is stopped (and counted unfinished) after this many times d5pipe's wall time")
    ap.add_argument("--slurm-conf", type=Path)
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.shards.split(",") if s.strip()]
    work = Path(tempfile.mkdtemp(prefix="d5-slurm-scale-"))
    state = work / "sandbox"
    write_shims(work / "bin")
    env, cpus = sandbox(args, state)
    env["PATH"] = f"{work / 'bin'}{os.pathsep}{env['PATH']}"
    slots = min(args.jobs, cpus)
    print(f"cluster: {cpus} CPUs; tasks in flight {args.jobs}; slots for the floor {slots}; "
          f"MaxArraySize={args.max_array_size} MaxJobCount={args.max_job_count}", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        for shards in sizes:
            row = {"d5pipe": d5pipe_sweep(shards, args, work, env, slots)}
            rows.append(row)
            print_d5pipe(row["d5pipe"], slots)
            (work / "results.json").write_text(json.dumps(rows, indent=1, default=str))  # kept if a peer is stopped
            if args.peers and shards == (args.peers_at or max(sizes)):
                limit = max(300.0, args.peer_timeout_factor * row["d5pipe"]["wall_s"])
                row["snakemake"] = snakemake_peer(shards, args, work, env, limit)
                print_peer("snakemake", row["snakemake"], shards)
                row["submitit"] = submitit_peer(shards, args, work, env, limit)
                print_peer("submitit", row["submitit"], shards)
                (work / "results.json").write_text(json.dumps(rows, indent=1, default=str))
        if len(rows) >= 2:
            first, last = rows[0]["d5pipe"], rows[-1]["d5pipe"]
            ratio = last["overhead_per_shard_s"] / first["overhead_per_shard_s"] if first["overhead_per_shard_s"] > 0 else float("nan")
            print(f"\noverhead per shard at {last['shards']} / at {first['shards']}: {ratio:.2f} (goal <= 1.5)")
        (work / "results.json").write_text(json.dumps(rows, indent=1, default=str))
        print(f"results: {work / 'results.json'}")
    finally:
        if not args.slurm_conf and not args.keep:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm_sandbox.py"), "down", str(state)],
                           check=False, timeout=600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
