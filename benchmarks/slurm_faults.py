"""A sweep on a SLURM sandbox of many nodes through every fault a site throws at it, one after
another in the same run: 10% of the nodes set DOWN, slurmd killed on several nodes (their jobs end
NODE_FAIL), slurmctld restarted, slurmdbd stopped for two minutes, a running array task requeued.

What it checks and prints: the exit code of ``d5pipe run`` (0, or 75 and then a plain re-run of
the same command that ends 0); every planned point recorded exactly once, ok; how many points
started more than once (those of the jobs the faults killed) and the most starts of one point;
what ``d5pipe status`` says happened (its ``slurm:`` lines, from d5pipe.results.slurm_incidents),
and whether each fault is among them. Each fault waits until a share of the points is recorded, so
it hits a run in full flight. Needs root and Debian's Slurm (scripts/slurm_sandbox.py).

  python benchmarks/slurm_faults.py [--nodes 128] [--shards 300] [--points-per-shard 4] [--jobs 20]
      [--dbd-down-s 120]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_slurm_scale import executions, experiment, planned  # noqa: E402

SANDBOX = [sys.executable, str(ROOT / "scripts" / "slurm_sandbox.py")]


def sandbox(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run([*SANDBOX, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"slurm_sandbox.py {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def running_nodes(env: dict[str, str], run_dir: Path) -> list[tuple[str, str]]:
    """(job ID, node) of the run's running jobs and array tasks."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "R", "-o", "%i|%N|%Z"], env=env, capture_output=True,
                         text=True, timeout=60, check=False).stdout
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
    return [(j, n) for j, n, wd in rows if os.path.realpath(wd) == os.path.realpath(run_dir)]


def records(run_dir: Path) -> int:
    """Points recorded so far, every stage's (the sweep has two)."""
    return len(list((run_dir / "points").glob("*/*.json")))


def faults(state: Path, env: dict[str, str], run_dir: Path, total: int, nodes: int, args: argparse.Namespace,
           stop: threading.Event, did: list[str]) -> None:
    """The faults, each once a share of the points is recorded (module docstring)."""
    def at(share: float) -> bool:
        while not stop.is_set() and records(run_dir) < share * total:
            time.sleep(1)
        return not stop.is_set()

    def note(what: str) -> None:
        did.append(what)
        print(f"  [{time.strftime('%H:%M:%S')}] {what} ({records(run_dir)}/{total} points recorded)", flush=True)

    if not at(0.10):
        return
    # 10% of the nodes, those running the run's jobs first (a DOWN node that ran none of them is
    # not the run's incident, and status rightly leaves it out), the rest from the last node down
    busy_now = sorted({n for _, n in running_nodes(env, run_dir)}, key=lambda n: int(n.removeprefix("node")))
    want = max(1, nodes // 10)
    down = busy_now[:max(1, want // 2)]
    down += [f"node{k}" for k in range(nodes, 0, -1) if f"node{k}" not in down][:want - len(down)]
    sandbox("set-down", str(state), ",".join(down), "--reason", "slurm_faults: 10% of nodes down")
    note(f"set DOWN {len(down)} nodes ({', '.join(down)})")
    if not at(0.20):
        return
    busy = sorted({n for _, n in running_nodes(env, run_dir) if n not in down})[:args.kill]
    for name in busy:
        sandbox("kill-node", str(state), name)
    note(f"killed slurmd on {', '.join(busy) or 'no busy node'}")
    if not at(0.30):
        return
    sandbox("restart-controller", str(state))
    note("restarted slurmctld")
    for name in busy:
        sandbox("restart-node", str(state), name)
    if not at(0.40):
        return
    sandbox("stop-dbd", str(state))
    note(f"stopped slurmdbd for {args.dbd_down_s:.0f} s")
    stop.wait(args.dbd_down_s)
    sandbox("start-dbd", str(state))
    note("started slurmdbd again")
    if not at(0.60):
        return
    tasks = [j for j, _ in running_nodes(env, run_dir) if "_" in j]
    done = subprocess.run(["scontrol", "requeue", tasks[0]], env=env, capture_output=True, text=True, timeout=60,
                          check=False) if tasks else None
    if done is not None and done.returncode == 0:
        note(f"requeued array task {tasks[0]}")
    else:  # said, so that a run without the requeue is not read as one that survived it
        note("requeue: " + ("no array task running" if done is None else f"scontrol said {done.stderr.strip()}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--cpus-per-node", type=int, default=4)
    ap.add_argument("--shards", type=int, default=300)
    ap.add_argument("--points-per-shard", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--kill", type=int, default=3, help="nodes whose slurmd is killed")
    ap.add_argument("--dbd-down-s", type=float, default=120.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="d5-slurm-faults-"))
    state = work / "sandbox"
    sandbox("up", str(state), "--nodes", str(args.nodes), "--cpus-per-node", str(args.cpus_per_node),
            "--min-job-age", "600", "--install-etc-conf", timeout=1800)
    env = {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf")}
    conf = work / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "slurm_scale.yaml").write_text(experiment(args.shards, args.points_per_shard))
    run_dir = work / "run"
    argv = [sys.executable, "-m", "d5pipe.cli.main", "run", "slurm_scale", "--config-dir", str(conf), "--out",
            str(run_dir), "--executor", "slurm", "--jobs", str(args.jobs), "executor.resources.default.runtime_min=30",
            "executor.resources.default.mem_mb=200", "executor.retries=1", "executor.poll_s=10"]
    total = args.shards * args.points_per_shard
    stop, did = threading.Event(), list[str]()
    thread = threading.Thread(target=faults, args=(state, env, run_dir, total, args.nodes, args, stop, did),
                              daemon=True)
    rows: list[dict[str, Any]] = []
    try:
        print(f"{args.nodes} nodes; {args.shards} shards of {args.points_per_shard} points; "
              f"{args.jobs} tasks in flight", flush=True)
        thread.start()
        for attempt in (1, 2):
            t0 = time.monotonic()
            proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=7200, check=False)
            rows.append({"rc": proc.returncode, "wall_s": time.monotonic() - t0, "tail": proc.stdout[-1500:]})
            print(f"run {attempt}: exit {proc.returncode} after {rows[-1]['wall_s']:.0f} s", flush=True)
            if proc.returncode != 75:
                break
        stop.set()
        thread.join(60)
        if rows[-1]["rc"] != 0:
            print(rows[-1]["tail"])
        ids = planned(run_dir)
        recorded = {p.stem for p in (run_dir / "points").glob("*/*.json")}
        starts = executions(run_dir)
        again = {p: n for p, n in starts.items() if n > 1}
        print(f"points: {len(ids)} planned, {len(recorded & ids)} recorded (missing {len(ids - recorded)}, "
              f"extra {len(recorded - ids)}); started more than once: {len(again)} "
              f"(most {max(again.values(), default=1)} starts)")
        status = subprocess.run([sys.executable, "-m", "d5pipe.cli.main", "status", str(run_dir)], env=env,
                                capture_output=True, text=True, timeout=300, check=False).stdout
        print("d5pipe status:\n" + "\n".join(f"  {line}" for line in status.splitlines()))
        said = status.lower()
        for fault, word in (("nodes DOWN", " down "), ("NODE_FAIL", "node_fail"), ("requeue", "ran 2 times"),
                            ("accounting outage", "status query")):
            print(f"  status names {fault}: {word in said}")
        print(f"faults applied: {did}")
        ok = rows[-1]["rc"] == 0 and recorded == ids
        print(f"verdict: {'every point once, ok' if ok else 'FAILED'}")
        return 0 if ok else 1
    finally:
        stop.set()
        if not args.keep:
            subprocess.run([*SANDBOX, "down", str(state)], check=False, timeout=600)


if __name__ == "__main__":
    raise SystemExit(main())
