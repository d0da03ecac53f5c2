#!/usr/bin/env python3
"""A real SLURM cluster of N nodes on this one machine, to try d5pipe's SLURM path without a site.

One ``slurmd`` per node, each in its own network namespace on the bridge ``d5br0`` (node K at
``10.77.0.(10+K)``, K up to 244), a real ``slurmctld``, ``slurmdbd`` on a MariaDB of its own
(``sacct`` works) and ``munged``; nodes may declare more CPUs than the machine has. Site limits
(``MaxArraySize``, ``MaxJobCount``, ``MinJobAge``; ``MaxSubmitJobs`` on your association) can be
lowered on purpose. ``up`` returns while the daemons keep running; every other command acts on
them by PID from ``STATE_DIR/pids.json``. Needs root (namespaces, /etc/hosts) and the Debian
packages of ``tests/cluster/install.sh``. Only one such cluster runs on a machine at a time.

    sudo python3 scripts/slurm_sandbox.py up /tmp/sb --nodes 16 --install-etc-conf
    eval "$(python3 scripts/slurm_sandbox.py env /tmp/sb)"     # export SLURM_CONF=...
    sinfo; sbatch --wrap hostname; sacct
    sudo python3 scripts/slurm_sandbox.py down /tmp/sb

Faults on demand: ``kill-node`` (its slurmd and jobs die: they end NODE_FAIL), ``restart-node``,
``set-down`` (scontrol State=DOWN), ``restart-controller``, ``stop-dbd``/``start-dbd``.
The cluster code is ``tests/cluster/multinode_cluster.py`` (the test suite's 3-node cluster is
the same thing with N=3).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

CLUSTER_DIR = Path(__file__).resolve().parents[1] / "tests" / "cluster"
PROG = "slurm_sandbox.py"
# what `up` writes under STATE_DIR (and removes there when it starts again on a stopped one)
STATE_SUBDIRS = ("etc", "munge", "log", "run", "spool", "tmp", "mariadb")


def _load_cluster_module() -> ModuleType:
    """tests/cluster/multinode_cluster.py, under the name the pytest fixture gives it."""
    name = "d5pipe_tests_multinode_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CLUSTER_DIR / "multinode_cluster.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


mn = _load_cluster_module()


class UsageError(Exception):
    """Bad input: exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit 2 (argparse prints the usage block as well)."""
        self.exit(2, f"{self.prog}: error: {message} (see {PROG} -h)\n")


def _int_at_least(minimum: int, words: str) -> Any:
    """An argparse type: an integer of at least ``minimum`` (``words`` says the bound in an error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {words}, not {value}")
        return value
    return parse


_positive = _int_at_least(1, "at least 1")
_non_negative = _int_at_least(0, "0 or more")


def _node_count(text: str) -> int:
    value = _positive(text)
    if value > mn.netns.MAX_NODES:
        raise argparse.ArgumentTypeError(f"at most {mn.netns.MAX_NODES} nodes (one /24 bridge "
                                         f"subnet), not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                     epilog="Every command takes the STATE_DIR that `up` was given.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("state_dir", metavar="STATE_DIR", type=Path,
                       help="directory holding the cluster's config, logs, spool and database")
        return p

    up = command("up", "start the cluster and return once every node is idle")
    up.add_argument("--nodes", type=_node_count, required=True, metavar="N",
                    help=f"compute nodes node1..nodeN (1..{mn.netns.MAX_NODES})")
    up.add_argument("--cpus-per-node", type=_positive, default=2, metavar="C",
                    help="CPUs each node declares; may exceed the real cores (default 2)")
    up.add_argument("--real-memory-mb", type=_positive, default=2048, metavar="M",
                    help="RealMemory each node declares, MiB (default 2048)")
    up.add_argument("--max-array-size", type=_positive, default=1001, metavar="A",
                    help="MaxArraySize: array indices must stay below A (Slurm's default 1001)")
    up.add_argument("--max-job-count", type=_positive, default=10000, metavar="K",
                    help="MaxJobCount: job records slurmctld holds, array tasks included "
                         "(Slurm's default 10000)")
    up.add_argument("--max-submit-jobs", type=_positive, default=None, metavar="S",
                    help="MaxSubmitJobs on your user's association (default: no limit)")
    up.add_argument("--min-job-age", type=_non_negative, default=600, metavar="SEC",
                    help="MinJobAge: seconds a finished job stays in squeue (default 600)")
    up.add_argument("--install-etc-conf", action="store_true",
                    help="also install the config as /etc/slurm/slurm.conf (restored by down). "
                         "Needed to run d5pipe --executor slurm on the sandbox: the Snakemake "
                         "SLURM plugin's job steps drop SLURM_CONF and read that file. Off by "
                         "default so that the sandbox never takes over a machine's own config")
    up.add_argument("--timeout", type=_positive, default=300, metavar="SEC",
                    help="give up on a daemon or node not ready after SEC (default 300)")
    command("down", "stop every daemon, remove the namespaces and bridge, restore /etc files")
    command("env", "print what to export to use the cluster (eval it)")
    command("status", "daemons (running or not) and node states; exit 1 unless all run")
    kill = command("kill-node", "SIGKILL a node's slurmd and every process on it (its jobs "
                                "end NODE_FAIL; the node goes DOWN after ~20 s)")
    kill.add_argument("name", metavar="NAME", help="node name, e.g. node3")
    restart = command("restart-node", "start a node's slurmd again (resume it if set DOWN); "
                                      "wait until it is idle")
    restart.add_argument("name", metavar="NAME", help="node name, e.g. node3")
    down = command("set-down", "scontrol update State=DOWN (its jobs are killed; restart-node "
                               "resumes it)")
    down.add_argument("names", metavar="NAMES", help="node1,node2 or node[1-4]")
    down.add_argument("--reason", default="d5pipe sandbox: set down",
                      help="Reason= for scontrol (default: %(default)s)")
    ctld = command("restart-controller", "stop slurmctld and start it again on its saved "
                                         "state; wait until it answers")
    ctld.add_argument("--hard", action="store_true",
                      help="SIGKILL instead of SIGTERM (no state saved at exit)")
    command("stop-dbd", "stop slurmdbd (sacct fails; slurmctld queues records meanwhile)")
    command("start-dbd", "start slurmdbd again and wait until it answers")
    return parser


# --------------------------------------------------------------------- commands
def _attach(state_dir: Path) -> Any:
    if not (state_dir / "cluster.json").is_file():
        raise UsageError(f"no sandbox under {state_dir} (start one with: {PROG} up "
                         f"{state_dir} --nodes N)")
    return mn.MultiNodeCluster.attach(state_dir)


def _running(state_dir: Path) -> Any:
    cluster = _attach(state_dir)
    if cluster.daemons().get("slurmctld") is None:
        raise mn.ClusterError(f"the sandbox under {state_dir} is not running (slurmctld is "
                              f"down; `{PROG} status {state_dir}`)")
    return cluster


def _node(cluster: Any, name: str) -> str:
    if name not in cluster.node_names:
        raise UsageError(f"no node {name!r}: the nodes are node1..node{len(cluster.node_names)}")
    return name


def _env_lines(cluster: Any) -> list[str]:
    n = len(cluster.node_names)
    return [f"export SLURM_CONF={cluster.conf}",
            "# the nodes share one kernel: Open MPI (Horovod, mpi4py) must talk TCP over the bridge",
            "export OMPI_MCA_btl=self,tcp",
            f"# partition: {mn.PARTITION} (the default; account {mn.ACCOUNT}); nodes "
            f"node[1-{n}]; d5pipe: --executor slurm "
            f"executor.resources.default.partition={mn.PARTITION}"]


def cmd_up(args: argparse.Namespace) -> int:
    root = args.state_dir.resolve()
    if os.geteuid() != 0:
        raise mn.ClusterError("the sandbox needs root (network namespaces, /etc/hosts): "
                              "run it with sudo")
    if (root / "cluster.json").is_file():
        old = mn.MultiNodeCluster.attach(root)
        if any(pid is not None for pid in old.daemons().values()):
            raise mn.ClusterError(f"a sandbox is already up under {root}; `{PROG} down {root}` "
                                  "first")
        old.stop()  # a crashed one's namespaces and /etc entries, if any
        for sub in STATE_SUBDIRS:  # a fresh cluster: no jobs or accounting of the last one
            shutil.rmtree(root / sub, ignore_errors=True)
    settings = mn.Settings(n_nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                           real_memory_mb=args.real_memory_mb,
                           install_etc_conf=args.install_etc_conf,
                           max_array_size=args.max_array_size, max_job_count=args.max_job_count,
                           min_job_age=args.min_job_age, max_submit_jobs=args.max_submit_jobs,
                           detached=True)
    cluster = mn.MultiNodeCluster(root, settings=settings)
    cluster.start(timeout_s=float(args.timeout))
    phases = ", ".join(f"{k} {v:.1f}" for k, v in cluster.phase_seconds.items())
    print(f"# {args.nodes} nodes up in {cluster.start_seconds:.1f} s ({phases}) under {root}; "
          f"stop with: {PROG} down {root}", file=sys.stderr)
    print("\n".join(_env_lines(cluster)))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cluster = _attach(args.state_dir)
    cluster.stop()
    left = cluster.leftover_processes()
    if left:
        raise mn.ClusterError(f"processes {left} of the sandbox survived")
    print(f"# sandbox under {cluster.root} stopped", file=sys.stderr)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    print("\n".join(_env_lines(_attach(args.state_dir))))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = _attach(args.state_dir)
    daemons = cluster.daemons()
    for name in mn.HOST_DAEMONS:
        pid = daemons[name]
        print(f"{name:10} {'running, pid ' + str(pid) if pid else 'not running'}")
    slurmds = [n for n in daemons if n.startswith("slurmd@")]
    dead = [n.split("@")[1] for n in slurmds if daemons[n] is None]
    print(f"{'slurmd':10} {len(slurmds) - len(dead)}/{len(slurmds)} running"
          + (f"; not running: {','.join(dead)}" if dead else ""))
    if daemons["slurmctld"] is not None:
        out = cluster.run(["sinfo", "-h", "-o", "%T %D %N"]).stdout.strip()
        for line in out.splitlines():
            state, count, nodes = line.split(maxsplit=2)
            print(f"{'nodes':10} {count:>4} {state:12} {nodes}")
    settings = cluster.settings
    print(f"{'limits':10} MaxArraySize={settings.max_array_size} "
          f"MaxJobCount={settings.max_job_count} MinJobAge={settings.min_job_age} "
          f"MaxSubmitJobs={settings.max_submit_jobs or 'none'}")
    print(f"{'config':10} {cluster.conf}")
    return 0 if all(pid is not None for pid in daemons.values()) else 1


def cmd_kill_node(args: argparse.Namespace) -> int:
    cluster = _attach(args.state_dir)
    killed = cluster.kill_node(_node(cluster, args.name))
    print(f"# {args.name}: killed {len(killed)} processes (slurmd, steps, jobs)", file=sys.stderr)
    return 0


def cmd_restart_node(args: argparse.Namespace) -> int:
    cluster = _running(args.state_dir)
    cluster.restart_node(_node(cluster, args.name))
    print(f"# {args.name} idle", file=sys.stderr)
    return 0


def _hostnames(cluster: Any, names: str) -> list[str]:
    proc = cluster.run(["scontrol", "show", "hostnames", names])
    found: list[str] = proc.stdout.split()
    if proc.returncode != 0 or not found:
        raise UsageError(f"not a node list: {names!r} ({proc.stderr.strip() or 'empty'})")
    for name in found:
        _node(cluster, name)
    return found


def cmd_set_down(args: argparse.Namespace) -> int:
    cluster = _running(args.state_dir)
    names = _hostnames(cluster, args.names)
    cluster.set_down(names, args.reason)
    print(f"# set DOWN: {','.join(names)}", file=sys.stderr)
    return 0


def cmd_restart_controller(args: argparse.Namespace) -> int:
    cluster = _attach(args.state_dir)
    seconds = cluster.restart_controller(hard=args.hard)
    print(f"# slurmctld restarted ({'SIGKILL' if args.hard else 'SIGTERM'}); answering after "
          f"{seconds:.1f} s", file=sys.stderr)
    return 0


def cmd_stop_dbd(args: argparse.Namespace) -> int:
    _attach(args.state_dir).stop_dbd()
    print("# slurmdbd stopped", file=sys.stderr)
    return 0


def cmd_start_dbd(args: argparse.Namespace) -> int:
    _running(args.state_dir).start_dbd()
    print("# slurmdbd answering", file=sys.stderr)
    return 0


COMMANDS = {"up": cmd_up, "down": cmd_down, "env": cmd_env, "status": cmd_status,
            "kill-node": cmd_kill_node, "restart-node": cmd_restart_node,
            "set-down": cmd_set_down, "restart-controller": cmd_restart_controller,
            "stop-dbd": cmd_stop_dbd, "start-dbd": cmd_start_dbd}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (mn.ClusterError, mn.netns.NetworkError, mn.accounting.AccountingError,
            subprocess.TimeoutExpired, OSError) as exc:
        first, _, rest = str(exc).partition("\n")
        print(f"{PROG}: error: {first}", file=sys.stderr)
        if rest:  # the tail of the failing daemon's log
            print(rest, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
