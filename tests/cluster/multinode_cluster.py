"""A real multi-node SLURM cluster on one machine, for tests.

Each compute node ``nodeK`` is a ``slurmd`` in its own network namespace ``d5nK`` (address
``10.77.0.(10+K)`` on the bridge ``d5br0``, own hostname through a UTS namespace, own spool, tmp,
pid file and log); ``slurmctld`` runs on the host's network as ``d5ctl``, bound to the bridge
address ``10.77.0.1``. Accounting is real: ``slurmdbd`` on a MariaDB of its own and
``jobacct_gather/linux``, so ``sacct`` reports State, Elapsed, TotalCPU and MaxRSS. One
``munged`` serves all nodes (a unix socket is reachable from every network namespace).
All daemons are children started here and stopped by PID; all state lives under one directory.
While the cluster runs the node names are in ``/etc/hosts`` (and, unless
``install_etc_conf=False``, the config is ``/etc/slurm/slurm.conf``); :meth:`stop` restores both.
Needs root. A dead node is noticed within seconds (``SlurmdTimeout=10``); when its slurmd comes
back it is idle again (``ReturnToService=1``; a node set DOWN by scontrol stays down until
resumed); jobs of a failed node end as NODE_FAIL (``JobRequeue=0``) rather than being requeued.
``scripts/slurm_sandbox.py`` runs the same cluster with N nodes and site limits for users.

Command line::

    python tests/cluster/multinode_cluster.py start STATE_DIR   # prints export SLURM_CONF=...
    python tests/cluster/multinode_cluster.py stop STATE_DIR
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import signal
import string
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any


def _sibling(stem: str) -> ModuleType:
    """Load ``tests/cluster/<stem>.py`` once, under the name the pytest fixtures use."""
    name = f"d5pipe_tests_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


single = _sibling("slurm_cluster")
netns = _sibling("netns")
accounting = _sibling("accounting")
ClusterError = single.ClusterError

CLUSTER_NAME = "d5pipe"
ACCOUNT = "d5pipe"
PARTITION = "debug"
CTLD_NAME = "d5ctl"  # slurmctld's hostname (own UTS namespace), at the bridge address
PMIX_LIB = Path("/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so")  # what mpi_pmix.so dlopens
RECORD = Path("/run/d5pipe-multinode.json")  # which state dir owns the bridge and namespaces
HOST_DAEMONS: tuple[str, ...] = ("munged", "mariadbd", "slurmdbd", "slurmctld")
STRAY_NAMES = frozenset({*HOST_DAEMONS, "slurmd", "slurmstepd", "slurmscriptd"})
WAIT_S = 120.0
CONF_TEMPLATE = Path(__file__).with_name("multinode_slurm.conf.in")
SANDBOX_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_sandbox.py"


def binaries_present() -> bool:
    """True when SLURM (with slurmdbd), munge, MariaDB, iproute2 and util-linux are there."""
    return single.binaries_present() and all(shutil.which(b) for b in (
        "slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb", "ip",
        "unshare", "nsenter"))


def pmix_plugin_available(env: dict[str, str] | None = None) -> bool:
    """True when ``srun --mpi=pmix`` can work: srun lists pmix and Debian's libpmix loads.

    ``env`` must name a running cluster's ``SLURM_CONF`` (srun needs a config to list plugins).
    """
    try:
        ctypes.CDLL(str(PMIX_LIB))
        proc = subprocess.run(["srun", "--mpi=list"], env=env, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "pmix" in proc.stdout + proc.stderr


def _tail(path: Path, n: int = 30) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return f"  ({path}: no such file)"
    return "\n".join(f"  {line}" for line in lines) or f"  ({path}: empty)"


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): tells a live owner from a reused PID."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _read_record() -> dict[str, Any] | None:
    try:
        rec = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and "state_dir" in rec else None


@dataclass(frozen=True)
class Settings:
    """What a cluster was started with; kept in ``STATE_DIR/cluster.json`` so that another
    process (``slurm_sandbox.py down``, a stale-cluster cleanup) acts on the same cluster."""

    n_nodes: int = 3
    cpus_per_node: int = 2
    real_memory_mb: int = 2048
    install_etc_conf: bool = True
    max_array_size: int = 1001  # Slurm's defaults
    max_job_count: int = 10000
    min_job_age: int = 600
    max_submit_jobs: int | None = None  # on the user's association; None: no limit
    # started by a command that returned (slurm_sandbox.py up): the cluster is stale only once
    # its daemons are gone, not when the process that started it has exited
    detached: bool = False

    @classmethod
    def load(cls, root: Path) -> Settings | None:
        try:
            raw = json.loads((root / "cluster.json").read_text())
        except (OSError, ValueError):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def save(self, root: Path) -> None:
        (root / "cluster.json").write_text(json.dumps(asdict(self)))


def render_slurm_conf(root: Path, nodes: tuple[Any, ...], ports: dict[str, int], cpus: int,
                      real_memory_mb: int, settings: Settings | None = None) -> str:
    """The slurm.conf of the cluster under ``root`` (template: ``multinode_slurm.conf.in``)."""
    settings = settings or Settings()
    node_lines = "\n".join(f"NodeName={n.name} NodeAddr={n.addr} CPUs={cpus} "
                           f"RealMemory={real_memory_mb} State=UNKNOWN" for n in nodes)
    return string.Template(CONF_TEMPLATE.read_text()).substitute(
        marker=f"{single.MARKER}{root}", cluster=CLUSTER_NAME, ctld_name=CTLD_NAME,
        ctld_addr=netns.HOST_ADDR, ctld_port=ports["ctld"], slurmd_port=ports["slurmd"],
        dbd_port=ports["dbd"], munge_socket=root / "munge" / "munge.socket", root=root,
        node_lines=node_lines, partition=PARTITION, node_list=",".join(n.name for n in nodes),
        min_job_age=settings.min_job_age, max_array_size=settings.max_array_size,
        max_job_count=settings.max_job_count)


class MultiNodeCluster:
    """Start and stop the ``n_nodes``-node test cluster whose state lives under ``state_dir``."""

    def __init__(self, state_dir: Path | str, n_nodes: int = 3, cpus_per_node: int = 2,
                 real_memory_mb: int = 2048, install_etc_conf: bool = True,
                 settings: Settings | None = None) -> None:
        """``install_etc_conf=False`` leaves /etc/slurm alone (clients then need ``SLURM_CONF``,
        which :meth:`env` sets); it lets the one-node test cluster own that file meanwhile.
        ``settings``, when given, replaces the other keyword arguments (site limits and all).
        A cluster started elsewhere is reached with :meth:`attach`."""
        self.root = Path(state_dir).resolve()
        self.settings = settings or Settings(n_nodes=n_nodes, cpus_per_node=cpus_per_node,
                                             real_memory_mb=real_memory_mb,
                                             install_etc_conf=install_etc_conf)
        self.network = netns.Network(self.settings.n_nodes)
        self.cpus_per_node = self.settings.cpus_per_node
        self.real_memory_mb = self.settings.real_memory_mb
        self.install_etc_conf = self.settings.install_etc_conf
        self.hosts = netns.HostsFile(self.root / "etc" / "hosts.orig")
        # the one-node harness's /etc/slurm/slurm.conf handling, on the same paths under root
        self._etc = single.SlurmCluster(self.root, install_etc_conf=install_etc_conf)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.start_seconds: float | None = None
        # seconds per phase of the last start: network, munge+mariadb, slurmdbd, slurmctld, slurmd
        self.phase_seconds: dict[str, float] = {}
        self._phase_began = 0.0

    @classmethod
    def attach(cls, state_dir: Path | str, **defaults: Any) -> MultiNodeCluster:
        """The cluster whose state lives under ``state_dir``, as it was started (its
        ``cluster.json``); ``defaults`` (the constructor's keywords) when there is none."""
        root = Path(state_dir).resolve()
        settings = Settings.load(root)
        if settings is None:
            return cls(root, **defaults)
        return cls(root, settings=settings)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.network.nodes]

    @property
    def node_addrs(self) -> dict[str, str]:
        return {n.name: n.addr for n in self.network.nodes}

    @property
    def namespaces(self) -> list[str]:
        return [n.netns for n in self.network.nodes]

    @property
    def host_addr(self) -> str:
        return str(netns.HOST_ADDR)

    @property
    def logs(self) -> Path:
        return self.root / "log"

    def env(self) -> dict[str, str]:
        """os.environ plus ``SLURM_CONF`` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def pmix_plugin_available(self) -> bool:
        return pmix_plugin_available(self.env())

    # ----------------------------------------------------------------- start
    def start(self, timeout_s: float = WAIT_S) -> None:
        """Network, munged, MariaDB, slurmdbd, slurmctld, every slurmd; wait until all are idle.

        ``timeout_s`` bounds each wait; a daemon that dies or never gets ready raises
        :class:`ClusterError` with the tail of its log. A failed start stops what it started.
        """
        if self._procs:
            raise ClusterError(f"cluster under {self.root} is already started")
        if os.geteuid() != 0:
            raise ClusterError("the multi-node test cluster needs root (namespaces, /etc/hosts)")
        if not binaries_present():
            raise ClusterError(f"packages missing; run {single.INSTALL_SCRIPT}")
        began = self._phase_began = time.monotonic()
        self.phase_seconds = {}
        self._remove_stale()
        if self.install_etc_conf:
            self._etc._claim_etc_conf()
        RECORD.write_text(json.dumps({"state_dir": str(self.root), "owner": os.getpid(),
                                      "owner_start": _start_time(os.getpid()),
                                      "detached": self.settings.detached}))
        try:
            conf, acct = self._write_state()
            self.network.create()
            self.hosts.install({CTLD_NAME: netns.HOST_ADDR, **self.node_addrs})
            self._phase("network")
            if self.install_etc_conf:
                self._etc._install_etc_conf(conf)
            self._start_daemons(acct, timeout_s)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def _write_state(self) -> tuple[str, Any]:
        for sub in ("etc", "munge", "log", "run", "spool/slurmctld",
                    *(f"{d}/{n}" for n in self.node_names for d in ("spool", "tmp"))):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        self.settings.save(self.root)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        ports = {p: single._free_port() for p in ("ctld", "slurmd", "dbd", "db")}
        acct = accounting.Accounting(self.root, ports["db"], ports["dbd"], netns.HOST_ADDR)
        acct.write_dbd_conf(self.root / "munge" / "munge.socket")
        conf = render_slurm_conf(self.root, self.network.nodes, ports, self.cpus_per_node,
                                 self.real_memory_mb, self.settings)
        self.conf.write_text(conf)
        return conf, acct

    def _start_daemons(self, acct: Any, timeout_s: float) -> None:
        munge = self.root / "munge"
        # -f: munged refuses a socket in a directory others cannot enter (our 0700 munge/)
        self._spawn("munged", ["munged", "-F", "-f", f"--key-file={munge / 'munge.key'}",
                               f"--socket={munge / 'munge.socket'}",
                               f"--pid-file={self.root / 'run' / 'munged.pid'}",
                               f"--seed-file={munge / 'munged.seed'}"])
        self.wait_for((munge / "munge.socket").exists, "munged socket", timeout_s, ("munged",))
        acct.install_db()
        self._spawn("mariadbd", acct.mariadbd_argv())
        self.wait_for(acct.db_ready, "MariaDB", timeout_s, ("mariadbd",))
        acct.create_db_user()
        self._phase("munge+mariadb")
        self._spawn("slurmdbd", ["slurmdbd", "-D"])  # finds slurmdbd.conf beside SLURM_CONF
        self.wait_for(lambda: acct.dbd_ready(self.env()), "slurmdbd", timeout_s, ("slurmdbd",))
        acct.register(self.env(), CLUSTER_NAME, ACCOUNT)
        if self.settings.max_submit_jobs is not None:
            acct.limit_user(self.env(), CLUSTER_NAME, MaxSubmitJobs=self.settings.max_submit_jobs)
        self._phase("slurmdbd")
        self._spawn_slurmctld(timeout_s)
        self._phase("slurmctld")
        # every slurmd at once (a Popen each), then one sinfo loop until all are idle
        for name in self.node_names:
            self._spawn_slurmd(name)
        self.wait_for(lambda: set(self.node_states().values()) == {"idle"},
                      f"nodes {','.join(self.node_names)} idle", timeout_s,
                      ("slurmctld", *(f"slurmd@{n}" for n in self.node_names)))
        self._phase("slurmd")

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.phase_seconds[name] = now - self._phase_began
        self._phase_began = now

    def _spawn_slurmctld(self, timeout_s: float) -> None:
        """slurmctld under its own hostname (recovers its saved state); wait for its ping."""
        self._spawn("slurmctld", ["unshare", "--uts", "sh", "-c",
                                  f'hostname {CTLD_NAME} && exec "$@"', "sh",
                                  "slurmctld", "-D", "-f", str(self.conf)])
        self.wait_for(self.ping, "slurmctld ping", timeout_s, ("slurmctld",))

    def ping(self) -> bool:
        """True when slurmctld answers ``scontrol ping``."""
        return "UP" in self.run(["scontrol", "ping"]).stdout

    def _spawn_slurmd(self, name: str) -> None:
        argv = ["slurmd", "-D", "-N", name, "-f", str(self.conf)]
        self._spawn(f"slurmd@{name}", self.network.node(name).exec_argv(argv))

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.logs / f"{name}.stdout", "ab")  # noqa: SIM115 - the child owns it
        self._procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, env=self.env(), start_new_session=True)
        log.close()
        self._write_pids()

    def _write_pids(self, drop: str | None = None) -> None:
        """``{daemon: pid}``, the format the one-node harness reads to see a live cluster."""
        pids = {**self._recorded_pids(), **{n: p.pid for n, p in self._procs.items()}}
        pids.pop(drop or "", None)
        tmp = self.root / "pids.json.tmp"
        tmp.write_text(json.dumps(pids))
        os.replace(tmp, self.root / "pids.json")

    def _recorded_pids(self) -> dict[str, int]:
        path = self.root / "pids.json"
        pids = {k: int(v) for k, v in json.loads(path.read_text()).items()} if path.exists() else {}
        return {**pids, **{name: p.pid for name, p in self._procs.items()}}

    def daemon_log(self, name: str) -> str:
        """The tail of a daemon's own log and of its captured stdout/stderr."""
        own = {"mariadbd": "mariadb.log"}.get(name, name.replace("@", "-") + ".log")
        return "\n".join(f"{p}:\n{_tail(p)}" for p in (self.logs / own,
                                                        self.logs / f"{name}.stdout"))

    def wait_for(self, probe: Callable[[], Any], what: str, timeout_s: float = WAIT_S,
                 daemons: tuple[str, ...] = ()) -> Any:
        """Poll ``probe`` until it returns something truthy and return that. Raise ClusterError
        on timeout, or at once when a daemon started here exits; with the tail of its log or
        of ``daemons``' logs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}\n{self.daemon_log(name)}")
            try:
                if value := probe():
                    return value
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.25)
        logs = "\n".join(self.daemon_log(d) for d in daemons)
        raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")

    # ---------------------------------------------------------------- state
    def run(self, argv: list[str], timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
        """A SLURM client command against this cluster (not checked)."""
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(),
                              timeout=timeout_s, check=False)

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as sinfo prints it (``idle``, ``down*``, ``mixed*``, ...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
        return dict(zip(out[::2], out[1::2]))

    def sacct(self, job_id: str) -> list[dict[str, str]]:
        """sacct rows of a job and its steps (JobID, State, Elapsed, TotalCPU, MaxRSS, ...)."""
        fields = ["JobID", "State", "Elapsed", "TotalCPU", "MaxRSS", "NodeList", "ExitCode"]
        out = self.run(["sacct", "-n", "-P", "-j", job_id, f"--format={','.join(fields)}"]).stdout
        return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]

    # ---------------------------------------------------------- node faults
    def kill_node(self, name: str) -> list[int]:
        """A node dies mid-job: SIGKILL its slurmd and every process of its namespace."""
        node = self.network.node(name)
        recorded = self._recorded_pids().get(f"slurmd@{name}")
        killed: list[int] = []
        if recorded is not None and netns.comm(recorded) == "slurmd":
            netns.signal_pid(recorded, signal.SIGKILL)
            killed.append(recorded)
        killed += netns.kill_netns_processes(node.netns)
        proc = self._procs.pop(f"slurmd@{name}", None)
        if proc is not None:
            proc.wait(timeout=10)
        self._write_pids(drop=f"slurmd@{name}")
        return killed

    def slurmd_running(self, name: str) -> bool:
        """True while node ``name``'s slurmd lives (started here or by another process)."""
        proc = self._procs.get(f"slurmd@{name}")
        if proc is not None:
            return proc.poll() is None
        pid = self._recorded_pids().get(f"slurmd@{name}")
        return pid is not None and netns.comm(pid) == "slurmd"

    def restart_node(self, name: str, timeout_s: float = WAIT_S) -> None:
        """Start a killed node's slurmd again (if it is not running), resume it if it was set
        DOWN or drained, and wait until it is idle (or busy with jobs again)."""
        self.network.node(name)  # KeyError for a node that does not exist
        if not self.slurmd_running(name):
            self._proc_forget(f"slurmd@{name}")
            self._spawn_slurmd(name)
        resumed = 0.0

        def back() -> bool:
            nonlocal resumed
            state = self.node_states().get(name, "")
            # "down"/"drained" without "*": slurmd answers, an admin (or set_down) holds it
            if state.rstrip("*") != state or not state.startswith(("down", "drain")):
                return state in ("idle", "mixed", "allocated")
            if time.monotonic() - resumed > 5.0:
                self.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
                resumed = time.monotonic()
            return False

        self.wait_for(back, f"{name} idle", timeout_s, (f"slurmd@{name}",))

    def _proc_forget(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.wait(timeout=10)

    def set_down(self, names: list[str], reason: str = "d5pipe sandbox: set down") -> None:
        """``scontrol update State=DOWN``: the nodes' running jobs are killed (NODE_FAIL) and no
        job is scheduled there until :meth:`restart_node` resumes them."""
        for name in names:
            self.network.node(name)
        proc = self.run(["scontrol", "update", f"NodeName={','.join(names)}", "State=DOWN",
                         f"Reason={reason}"])
        if proc.returncode != 0:
            raise ClusterError(f"scontrol update State=DOWN failed: {proc.stderr.strip()}")

    # ------------------------------------------------------- daemon faults
    def restart_controller(self, hard: bool = False, timeout_s: float = WAIT_S) -> float:
        """Stop slurmctld (SIGTERM, or SIGKILL with ``hard``: no state saved at exit) and start
        it again on its saved state; return the seconds until it answered ``scontrol ping``."""
        began = time.monotonic()
        pid = self._recorded_pids().get("slurmctld")
        if pid is not None:
            if hard:
                netns.signal_pid(pid, signal.SIGKILL)
            netns.terminate(pid, "slurmctld", 30.0, self._procs.get("slurmctld"))
        self._procs.pop("slurmctld", None)
        # slurmscriptd (slurmctld's helper) goes with it; wait so that the new one starts alone
        self.wait_for(lambda: not [p for p in self.leftover_processes()
                                   if netns.comm(p) in ("slurmctld", "slurmscriptd")],
                      "the old slurmctld to exit", 30.0)
        self._spawn_slurmctld(timeout_s)
        return time.monotonic() - began

    def stop_dbd(self, timeout_s: float = 30.0) -> None:
        """Stop slurmdbd (slurmctld queues accounting records until it is back)."""
        pid = self._recorded_pids().get("slurmdbd")
        if pid is not None:
            netns.terminate(pid, "slurmdbd", timeout_s, self._procs.get("slurmdbd"))
        self._procs.pop("slurmdbd", None)
        self._write_pids(drop="slurmdbd")

    def start_dbd(self, timeout_s: float = WAIT_S) -> None:
        """Start slurmdbd again (if it is not running) and wait until sacctmgr gets answers."""
        pid = self._recorded_pids().get("slurmdbd")
        if pid is None or netns.comm(pid) != "slurmdbd":
            self._procs.pop("slurmdbd", None)
            self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self.wait_for(lambda: accounting.Accounting.dbd_ready(self.env()), "slurmdbd",
                      timeout_s, ("slurmdbd",))

    def daemons(self) -> dict[str, int | None]:
        """``{daemon: pid}`` of every daemon this cluster should run; None for one not running."""
        pids = self._recorded_pids()
        names = [*HOST_DAEMONS, *(f"slurmd@{n}" for n in self.node_names)]
        return {name: pids[name] if name in pids and single._pid_alive(pids[name]) else None
                for name in names}

    # ------------------------------------------------------------------ stop
    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop everything started here, by PID; remove the network; restore the /etc files.

        Idempotent: safe after a failed start, from another process (reads pids.json), twice.
        """
        pids = self._recorded_pids()
        if "slurmctld" in pids and single._pid_alive(pids["slurmctld"]):
            try:  # a courtesy: whatever is left is killed below
                ids = self.run(["squeue", "-h", "-o", "%i"]).stdout.split()
                if ids:
                    self.run(["scancel", *ids])
            except subprocess.TimeoutExpired:
                pass
        slurmds = {pid: self._procs.get(name) for name, pid in pids.items()
                   if name.startswith("slurmd@")}
        netns.terminate_all(slurmds, "slurmd", 5.0)  # all at once: 128 nodes stop in seconds
        rec = _read_record()
        ours = rec is None or Path(rec["state_dir"]) == self.root
        if ours:  # the namespaces are not another live cluster's
            netns.kill_netns_processes(self.namespaces)
        for name in reversed(HOST_DAEMONS):
            if name in pids:
                netns.terminate(pids[name], name, timeout_s, self._procs.get(name))
        for pid in self.leftover_processes():
            netns.signal_pid(pid, signal.SIGKILL)
        self._procs.clear()
        if ours:
            self.network.destroy()
            self.hosts.restore()
        if self.install_etc_conf:
            self._etc._restore_etc_conf()
        (self.root / "pids.json").unlink(missing_ok=True)
        if rec is not None and ours:
            RECORD.unlink(missing_ok=True)

    def leftover_processes(self) -> list[int]:
        """Live SLURM/munge/MariaDB processes whose open files or command line name our state dir
        (forked slurmd children, slurmstepd re-parented to init, ...)."""
        found: list[int] = netns.processes_referencing(str(self.root), STRAY_NAMES)
        return found

    def _remove_stale(self) -> None:
        """Stop the cluster a crashed or finished session left; refuse while its owner lives."""
        rec = _read_record()
        if rec is not None:
            owner = int(rec.get("owner", 0))
            other = MultiNodeCluster.attach(rec["state_dir"], install_etc_conf=True)
            if rec.get("detached"):  # a sandbox lives as long as its daemons
                live = [n for n, p in other._recorded_pids().items() if single._pid_alive(p)]
                in_use = f"in use ({', '.join(sorted(live)[:4])} running)" if live else ""
                stop_cmd = f"python {SANDBOX_SCRIPT} down {rec['state_dir']}"
            else:
                alive = (owner > 0 and netns.comm(owner) is not None
                         and _start_time(owner) == rec.get("owner_start"))
                in_use = f"in use by PID {owner}" if alive else ""
                stop_cmd = f"python {__file__} stop {rec['state_dir']}"
            if Path(rec["state_dir"]) != self.root and in_use:
                raise ClusterError(f"a multi-node SLURM cluster under {rec['state_dir']} is "
                                   f"{in_use}; only one can run at a time; stop it first: "
                                   f"{stop_cmd}")
            print(f"multinode cluster: stopping stale cluster under {rec['state_dir']}",
                  file=sys.stderr)
            other.stop()
            RECORD.unlink(missing_ok=True)
        netns.remove_stale()


def main(argv: list[str]) -> int:
    """``start|stop STATE_DIR``; start leaves the daemons running and returns."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: multinode_cluster.py start|stop STATE_DIR", file=sys.stderr)
        return 2
    cluster = MultiNodeCluster.attach(Path(argv[1])) if argv[0] == "stop" else \
        MultiNodeCluster(Path(argv[1]))
    if argv[0] == "start":
        cluster.start()
        nodes = " ".join(f"{n}={a}" for n, a in cluster.node_addrs.items())
        print(f"# {nodes}; started in {cluster.start_seconds:.1f} s", file=sys.stderr)
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
