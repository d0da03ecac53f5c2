"""Network namespaces on one Linux bridge, one per simulated compute node, for tests.

:class:`Network` creates the bridge (``d5br0``, ``10.77.0.1/24`` on the host), and for each
node ``nodeK`` a namespace ``d5nK`` holding the far end (``eth0``, ``10.77.0.(10+K)``) of a
veth pair whose host end (``d5vK``) is a port of the bridge. Everything it creates carries the
``d5`` names above, so :func:`remove_stale` can clear what a crashed session left behind.
:class:`HostsFile` adds the node names to ``/etc/hosts`` while a cluster runs and puts the file
back byte for byte afterwards. Needs root, ``ip`` (iproute2), ``nsenter`` and ``unshare`` (util-linux).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "d5br0"
NS_PREFIX = "d5n"
VETH_PREFIX = "d5v"
SUBNET = "10.77.0"
HOST_ADDR = f"{SUBNET}.1"
MAX_NODES = 244  # node K is SUBNET.(10+K): .11 .. .254 on the /24 (.255 is broadcast)
NETNS_DIR = Path("/run/netns")
HOSTS = Path("/etc/hosts")
HOSTS_MARKER = "# d5pipe multinode test cluster"


class NetworkError(RuntimeError):
    """A namespace, veth or bridge could not be created or removed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


@dataclass(frozen=True)
class NetNode:
    """One simulated compute node: its SLURM node name, namespace, address and veth ends."""

    name: str
    netns: str
    addr: str
    veth_host: str

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this node's network namespace under its own hostname (UTS).

        ``nsenter``, not ``ip netns exec``: the latter mounts a fresh /sys, which hides
        /sys/fs/cgroup, and slurmd refuses to start without it.
        """
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", "unshare", "--uts", "sh", "-c",
                f'hostname {self.name} && exec "$@"', "sh", *argv]


def netns_pids(netns: str) -> list[int]:
    """PIDs of the live processes whose network namespace is ``netns`` (like ``ip netns pids``)."""
    return netns_pids_many([netns])


def netns_pids_many(namespaces: list[str]) -> list[int]:
    """PIDs of the live processes in any of ``namespaces``: one pass over /proc for all of them
    (128 namespaces one by one took seconds)."""
    refs = set()
    for netns in namespaces:
        try:
            st = os.stat(NETNS_DIR / netns)
        except OSError:
            continue
        refs.add((st.st_ino, st.st_dev))
    if not refs:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            st = os.stat(entry / "ns" / "net")
            if (st.st_ino, st.st_dev) not in refs:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def kill_netns_processes(netns: str | list[str], timeout_s: float = 30.0) -> list[int]:
    """SIGKILL every process in ``netns`` (one name or several) until none is left (forks
    included); the killed PIDs."""
    names = [netns] if isinstance(netns, str) else netns
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while pids := netns_pids_many(names):
        if time.monotonic() > deadline:
            raise NetworkError(f"processes {pids} in namespaces {names} survive SIGKILL")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return killed


def comm(pid: int) -> str | None:
    """The command name of a live (not zombie) process, or None."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, IndexError):
        return None


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def terminate(pid: int, name: str, timeout_s: float,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; a recorded PID only while it is still ``name``
    (``proc``: our own child, reaped here)."""
    if proc is not None or comm(pid) == name:
        signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while comm(pid) is not None and time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        if comm(pid) is not None:
            signal_pid(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=10)


def terminate_all(pids: dict[int, subprocess.Popen[bytes] | None], name: str,
                  timeout_s: float) -> None:
    """:func:`terminate` for many processes at once: SIGTERM to all, one wait, SIGKILL to those
    left (each ``pid`` maps to our own child, reaped here, or None: then only while it is still
    ``name``)."""
    live = {pid: proc for pid, proc in pids.items() if proc is not None or comm(pid) == name}
    for pid in live:
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s

    def running(pid: int, proc: subprocess.Popen[bytes] | None) -> bool:
        return (proc is None or proc.poll() is None) and comm(pid) is not None

    while any(running(p, c) for p, c in live.items()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, proc in live.items():
        if running(pid, proc):
            signal_pid(pid, signal.SIGKILL)
    for proc in live.values():
        if proc is not None:
            proc.wait(timeout=10)


def processes_referencing(text: str, names: frozenset[str]) -> list[int]:
    """Live processes called one of ``names`` whose open files or command line contain ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in names:
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            refs = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            refs.append((entry / "cmdline").read_bytes().decode(errors="replace"))
        except (OSError, IndexError):
            continue
        if any(text in ref for ref in refs):
            found.append(int(entry.name))
    return found


def _harness_namespaces() -> list[str]:
    names = _ip("netns", "list", check=False).stdout.split("\n")
    return [n.split()[0] for n in names if n.split() and n.split()[0].startswith(NS_PREFIX)]


def remove_stale() -> None:
    """Kill the processes in, and delete, every namespace, veth and bridge named by this harness."""
    namespaces = _harness_namespaces()
    kill_netns_processes(namespaces)
    _ip_batch([f"netns del {ns}" for ns in namespaces])
    _ip_batch([f"link del {link.name}" for link in Path("/sys/class/net").iterdir()
               if link.name.startswith(VETH_PREFIX) or link.name == BRIDGE])


def _ip_batch(commands: list[str]) -> None:
    """``ip -force -batch -``: many commands in one process, going on past failures (a link
    already gone with its namespace)."""
    if commands:
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(commands) + "\n",
                       capture_output=True, text=True, timeout=120, check=False)


class Network:
    """The bridge and the namespaces of ``n_nodes`` nodes (``node1`` at ``10.77.0.11``, ...,
    ``node244`` at ``10.77.0.254``)."""

    def __init__(self, n_nodes: int) -> None:
        if not 1 <= n_nodes <= MAX_NODES:
            raise ValueError(f"n_nodes must be within 1..{MAX_NODES}, not {n_nodes}")
        self.nodes: tuple[NetNode, ...] = tuple(
            NetNode(f"node{k}", f"{NS_PREFIX}{k}", f"{SUBNET}.{10 + k}", f"{VETH_PREFIX}{k}")
            for k in range(1, n_nodes + 1))

    def node(self, name: str) -> NetNode:
        """The node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; nodes are {[n.name for n in self.nodes]}")

    def create(self) -> None:
        """Create the bridge and every node's namespace, veth pair, address and loopback."""
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{HOST_ADDR}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for node in self.nodes:
            _ip("netns", "add", node.netns)
            _ip("link", "add", node.veth_host, "type", "veth", "peer", "name", "eth0",
                "netns", node.netns)
            _ip("link", "set", node.veth_host, "master", BRIDGE)
            _ip("link", "set", node.veth_host, "up")
            inside = ("-n", node.netns)
            _ip(*inside, "addr", "add", f"{node.addr}/24", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")

    def destroy(self) -> None:
        """Kill what still runs in the namespaces; delete them, the veths and the bridge."""
        kill_netns_processes([node.netns for node in self.nodes])
        _ip_batch([f"netns del {node.netns}" for node in self.nodes
                   if (NETNS_DIR / node.netns).exists()])
        # a namespace's deletion takes its veth pair along; whatever is left goes now
        _ip_batch([f"link del {name}" for name in
                   [*(node.veth_host for node in self.nodes), BRIDGE] if _link_exists(name)])

    def leftovers(self) -> list[str]:
        """Namespaces, veths and the bridge of this harness that still exist."""
        found = _harness_namespaces()
        found += [link.name for link in Path("/sys/class/net").iterdir()
                  if link.name.startswith(VETH_PREFIX) or link.name == BRIDGE]
        return found


class HostsFile:
    """Node names in ``/etc/hosts`` while the cluster runs; the original restored exactly after.

    The file is rewritten in place (never replaced), as containers often bind-mount it.
    """

    def __init__(self, backup: Path, path: Path = HOSTS) -> None:
        self.path = path
        self.backup = backup
        self.ours = backup.with_name(backup.name + ".ours")

    @staticmethod
    def _strip(text: bytes) -> bytes:
        marker = HOSTS_MARKER.encode()
        return b"".join(line for line in text.splitlines(keepends=True) if marker not in line)

    def install(self, entries: dict[str, str]) -> None:
        """Add ``name -> address`` lines (replacing any a crashed earlier cluster left)."""
        current = self.path.read_bytes() if self.path.exists() else b""
        if not self.backup.exists():
            self.backup.write_bytes(self._strip(current))
        base = self._strip(current)
        if base and not base.endswith(b"\n"):
            base += b"\n"
        lines = "".join(f"{addr} {name} {HOSTS_MARKER}\n" for name, addr in entries.items())
        text = base + lines.encode()
        self.path.write_bytes(text)
        self.ours.write_bytes(text)

    def restore(self) -> None:
        """Put back the file as it was; if someone edited it meanwhile, only drop our lines."""
        if not self.path.exists():
            return
        current = self.path.read_bytes()
        if self.backup.exists() and self.ours.exists() and current == self.ours.read_bytes():
            self.path.write_bytes(self.backup.read_bytes())
        elif HOSTS_MARKER.encode() in current:
            self.path.write_bytes(self._strip(current))
        for f in (self.backup, self.ours):
            f.unlink(missing_ok=True)
