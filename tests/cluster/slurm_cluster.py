"""A real single-node SLURM cluster on loopback, for tests.

``munged``, ``slurmctld`` and ``slurmd`` run in the foreground as child processes of
whoever calls :meth:`SlurmCluster.start`; all state (config, munge key and socket,
spool, logs, job-completion log) lives under one directory. While the cluster runs
its config is also copied to ``/etc/slurm/slurm.conf`` (snakemake-executor-plugin-slurm
drops ``SLURM_CONF`` from the environment of its job steps); :meth:`SlurmCluster.stop`
restores what was there before and stops every daemon by PID.

Command line::

    python tests/cluster/slurm_cluster.py start STATE_DIR   # prints export SLURM_CONF=...
    python tests/cluster/slurm_cluster.py stop STATE_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ETC_SLURM_CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# d5pipe test cluster, state_dir="
NODE_NAME = "localhost"
PARTITION = "debug"
DAEMONS: tuple[str, ...] = ("munged", "slurmctld", "slurmd")
STRAY_NAMES: frozenset[str] = frozenset({*DAEMONS, "slurmstepd", "slurmscriptd"})
INSTALL_SCRIPT = Path(__file__).with_name("install.sh")


class ClusterError(RuntimeError):
    """The test cluster could not be started or stopped."""


def binaries_present() -> bool:
    """True when the SLURM daemons, client tools and munged are on PATH."""
    return all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "squeue", "munged"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hostname_is_loopback() -> bool:
    try:
        addr = socket.gethostbyname(socket.gethostname())
    except OSError:
        return False
    return addr.startswith("127.")


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class ClusterLayout:
    """Where everything of one cluster lives under its state directory."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_key(self) -> Path:
        return self.root / "munge" / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def spool(self) -> Path:
        return self.root / "spool" / "slurmd"

    @property
    def state(self) -> Path:
        return self.root / "spool" / "slurmctld"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def jobcomp(self) -> Path:
        return self.logs / "jobcomp.log"

    @property
    def pids(self) -> Path:
        return self.root / "pids.json"

    @property
    def etc_backup(self) -> Path:
        return self.root / "etc" / "previous-etc-slurm.conf"

    def mkdirs(self) -> None:
        for d in (self.conf.parent, self.munge_key.parent, self.spool, self.state, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.munge_key.parent.chmod(0o700)


def render_slurm_conf(layout: ClusterLayout, ctld_port: int, slurmd_port: int,
                      cpus: int, real_memory_mb: int) -> str:
    """The slurm.conf of a one-node cluster whose state lives under ``layout.root``."""
    comm = "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny" if _hostname_is_loopback() else ""
    lines = [
        f"{MARKER}{layout.root}",
        "ClusterName=d5pipe-test",
        f"SlurmctldHost={NODE_NAME}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"StateSaveLocation={layout.state}",
        f"SlurmdSpoolDir={layout.spool}",
        f"SlurmctldPidFile={layout.root / 'slurmctld.pid'}",
        f"SlurmdPidFile={layout.root / 'slurmd.pid'}",
        f"SlurmctldLogFile={layout.logs / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.logs / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={layout.jobcomp}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=50000",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=600",  # squeue keeps finished jobs 10 min (the plugin's status source)
        "KillWait=2",
        "OverTimeLimit=0",
        "InactiveLimit=0",
        "MailProg=/bin/true",
        "SlurmdParameters=config_overrides",  # CPUs may exceed the real core count
        comm,
        f"NodeName={NODE_NAME} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={real_memory_mb} "
        "State=UNKNOWN",
        # Test jobs mostly wait (Snakemake start-up, sleeping operators): let up to 4 share a CPU
        # so that concurrent test runs do not queue behind each other.
        f"PartitionName={PARTITION} Nodes={NODE_NAME} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE:4",
    ]
    return "\n".join(line for line in lines if line) + "\n"


class SlurmCluster:
    """Start and stop the one-node test cluster whose state lives under ``state_dir``."""

    def __init__(self, state_dir: Path, cpus: int = 4, real_memory_mb: int = 8192,
                 install_etc_conf: bool = True) -> None:
        """``install_etc_conf=False``: leave /etc/slurm alone (clients then need ``SLURM_CONF``;
        Snakemake's SLURM plugin does not work on such a cluster, plain sbatch/srun do)."""
        self.layout = ClusterLayout(Path(state_dir).resolve())
        self.install_etc_conf = install_etc_conf
        self.cpus = cpus
        self.real_memory_mb = real_memory_mb
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def conf(self) -> Path:
        return self.layout.conf

    def env(self) -> dict[str, str]:
        """os.environ plus ``SLURM_CONF`` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.layout.conf)}

    # ---------------------------------------------------------------- start
    def start(self, timeout_s: float = 60.0) -> None:
        """Bring munged, slurmctld and slurmd up and wait until the node is idle."""
        if not binaries_present():
            raise ClusterError(f"SLURM or munge is not installed; run {INSTALL_SCRIPT}")
        if self.install_etc_conf:
            self._claim_etc_conf()
        lay = self.layout
        lay.mkdirs()
        if not lay.munge_key.exists():
            lay.munge_key.write_bytes(os.urandom(1024))
            lay.munge_key.chmod(0o400)
        conf = render_slurm_conf(lay, _free_port(), _free_port(), self.cpus, self.real_memory_mb)
        lay.conf.write_text(conf)
        if self.install_etc_conf:
            self._install_etc_conf(conf)
        deadline = time.monotonic() + timeout_s
        try:
            self._spawn("munged", ["munged", "-F", "-f", f"--key-file={lay.munge_key}",
                                   f"--socket={lay.munge_socket}",
                                   f"--pid-file={lay.root / 'munged.pid'}",
                                   f"--log-file={lay.logs / 'munged.log'}",
                                   f"--seed-file={lay.root / 'munge' / 'munged.seed'}"])
            self._wait(lambda: lay.munge_socket.exists(), deadline, "munged socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(lay.conf)])
            self._wait(self._ctld_up, deadline, "slurmctld ping")
            self._spawn("slurmd", ["slurmd", "-D", "-N", NODE_NAME, "-f", str(lay.conf)])
            self._wait(self._node_idle, deadline, f"node {NODE_NAME} idle")
        except BaseException:
            self.stop()
            raise

    def _claim_etc_conf(self) -> None:
        """Refuse to start while another live test cluster owns /etc/slurm/slurm.conf."""
        if not ETC_SLURM_CONF.exists():
            return
        first = ETC_SLURM_CONF.read_text(errors="replace").split("\n", 1)[0]
        if not first.startswith(MARKER):
            return
        other = ClusterLayout(Path(first[len(MARKER):]))
        if other.root != self.layout.root and other.pids.exists():
            pids = json.loads(other.pids.read_text())
            if any(_pid_alive(int(p)) for p in pids.values()):
                raise ClusterError(f"another test cluster is running (state dir {other.root})")

    def _install_etc_conf(self, conf: str) -> None:
        lay = self.layout
        if ETC_SLURM_CONF.exists() and not lay.etc_backup.exists():
            current = ETC_SLURM_CONF.read_text(errors="replace")
            if not current.startswith(MARKER):  # never back up a stale test config
                shutil.copy2(ETC_SLURM_CONF, lay.etc_backup)
        ETC_SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        tmp = ETC_SLURM_CONF.with_name(f".slurm.conf.{os.getpid()}")
        tmp.write_text(conf)
        tmp.chmod(0o644)
        os.replace(tmp, ETC_SLURM_CONF)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.layout.logs / f"{name}.stdout", "ab")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=self.env(), start_new_session=True)
        log.close()
        self._procs[name] = proc
        self._write_pids()

    def _write_pids(self) -> None:
        pids = {name: p.pid for name, p in self._procs.items()}
        tmp = self.layout.pids.with_suffix(".tmp")
        tmp.write_text(json.dumps(pids))
        os.replace(tmp, self.layout.pids)

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}; see {self.layout.logs}")
            if ready():
                return
            time.sleep(0.1)
        raise ClusterError(f"timed out waiting for {what}; see {self.layout.logs}")

    def _run(self, argv: list[str], timeout_s: float = 10.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(),
                              timeout=timeout_s, check=False)

    def _ctld_up(self) -> bool:
        return "UP" in self._run(["scontrol", "ping"]).stdout

    def _node_idle(self) -> bool:
        out = self._run(["sinfo", "-h", "-N", "-n", NODE_NAME, "-o", "%T"]).stdout.strip()
        return out == "idle"

    # ----------------------------------------------------------------- stop
    def stop(self, timeout_s: float = 30.0) -> None:
        """Cancel all jobs, stop the daemons by PID, restore /etc/slurm/slurm.conf."""
        lay = self.layout
        pids = self._recorded_pids()
        if "slurmctld" in pids and _pid_alive(pids["slurmctld"]):
            self._cancel_all_jobs(min(10.0, timeout_s / 2))
        for name in reversed(DAEMONS):
            if name in pids:
                self._terminate(name, pids[name], timeout_s / 3)
        for pid in self.leftover_processes():
            self._terminate("stray", pid, 5.0)
        if self.install_etc_conf:
            self._restore_etc_conf()
        if lay.pids.exists():
            lay.pids.unlink()

    def _recorded_pids(self) -> dict[str, int]:
        if self._procs:
            return {name: p.pid for name, p in self._procs.items()}
        if self.layout.pids.exists():
            return {k: int(v) for k, v in json.loads(self.layout.pids.read_text()).items()}
        return {}

    def _cancel_all_jobs(self, timeout_s: float) -> None:
        ids = self._run(["squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i"]).stdout.split()
        if not ids:
            return
        self._run(["scancel", *ids])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._run(["squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i"]).stdout.split():
                return
            time.sleep(0.2)

    def _terminate(self, name: str, pid: int, timeout_s: float) -> None:
        proc = self._procs.get(name)
        if not _pid_alive(pid):
            if proc is not None:
                proc.wait(timeout=1)
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return
            if proc is None and not _pid_alive(pid):
                return
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if proc is not None:
            proc.wait(timeout=5)

    def leftover_processes(self) -> list[int]:
        """PIDs of live SLURM/munge processes that reference this cluster's state dir.

        Catches what the recorded PIDs miss: forked slurmd children and ``slurmstepd``
        processes (they re-parent to init) that hold a log, socket or spool file here.
        """
        root = str(self.layout.root)
        found: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or not _pid_alive(int(entry.name)):
                continue
            try:
                if (entry / "comm").read_text().strip() not in STRAY_NAMES:
                    continue
                refs = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
                refs.append((entry / "cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                continue
            if any(root in ref for ref in refs):
                found.append(int(entry.name))
        return found

    def _restore_etc_conf(self) -> None:
        lay = self.layout
        if ETC_SLURM_CONF.exists():
            first = ETC_SLURM_CONF.read_text(errors="replace").split("\n", 1)[0]
            if first != f"{MARKER}{lay.root}":
                return  # not ours (any more): leave it alone
            ETC_SLURM_CONF.unlink()
        if lay.etc_backup.exists():
            shutil.copy2(lay.etc_backup, ETC_SLURM_CONF)
            lay.etc_backup.unlink()

    # -------------------------------------------------------------- records
    def jobcomp_records(self) -> list[dict[str, str]]:
        """SLURM's own job-completion records (jobcomp/filetxt), one dict per finished job."""
        if not self.layout.jobcomp.exists():
            return []
        records = []
        for line in self.layout.jobcomp.read_text().splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if fields:
                records.append(fields)
        return records

    def wait_for_jobcomp(self, job_id: str, timeout_s: float = 30.0) -> dict[str, str]:
        """The completion record of ``job_id`` once SLURM has written it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for rec in self.jobcomp_records():
                if rec.get("JobId") == job_id:
                    return rec
            time.sleep(0.1)
        raise ClusterError(f"job {job_id} has no completion record after {timeout_s} s")


def main(argv: list[str]) -> int:
    """``start|stop STATE_DIR``; start leaves the daemons running and returns."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: slurm_cluster.py start|stop STATE_DIR", file=sys.stderr)
        return 2
    cluster = SlurmCluster(Path(argv[1]))
    if argv[0] == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
