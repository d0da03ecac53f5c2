"""MariaDB and slurmdbd for the multi-node test cluster: real SLURM accounting (``sacct``).

:class:`Accounting` knows where the database lives under the cluster's state directory and
builds the command lines and config files; :class:`~multinode_cluster.MultiNodeCluster`
spawns and watches the daemons. MariaDB listens on 127.0.0.1 and a unix socket of its own,
never on the system's socket, and its data directory is made afresh on every start.
"""

from __future__ import annotations

import getpass
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


class AccountingError(RuntimeError):
    """The accounting database or its SLURM registrations could not be set up."""


@dataclass
class Accounting:
    """The MariaDB + slurmdbd pair of one cluster whose state lives under ``root``."""

    root: Path
    db_port: int
    dbd_port: int
    dbd_addr: str
    password: str = field(default_factory=lambda: secrets.token_hex(12))

    @property
    def datadir(self) -> Path:
        return self.root / "mariadb" / "data"

    @property
    def socket(self) -> Path:
        return self.root / "mariadb" / "mariadb.sock"

    @property
    def db_log(self) -> Path:
        return self.root / "log" / "mariadb.log"

    @property
    def dbd_log(self) -> Path:
        return self.root / "log" / "slurmdbd.log"

    @property
    def dbd_conf(self) -> Path:
        """slurmdbd reads ``slurmdbd.conf`` from the directory of ``SLURM_CONF``."""
        return self.root / "etc" / "slurmdbd.conf"

    def install_db(self) -> None:
        """A fresh MariaDB data directory (root logs in without password over the socket)."""
        self.datadir.mkdir(parents=True, exist_ok=True)
        argv = ["mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal", "--skip-test-db"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise AccountingError(f"mariadb-install-db failed:\n{proc.stdout[-2000:]}"
                                  f"{proc.stderr[-2000:]}")

    def mariadbd_argv(self) -> list[str]:
        """MariaDB in the foreground, small and fast (durability is not needed for tests)."""
        return ["mariadbd", "--no-defaults", "--user=root", f"--datadir={self.datadir}",
                f"--socket={self.socket}", f"--port={self.db_port}", "--bind-address=127.0.0.1",
                f"--pid-file={self.root / 'mariadb' / 'mariadbd.pid'}",
                f"--log-error={self.db_log}", "--skip-name-resolve", "--performance-schema=OFF",
                "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0",
                "--innodb-lock-wait-timeout=900", "--max-connections=100"]

    def sql(self, statement: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run SQL as MariaDB's root over this database's own socket."""
        return subprocess.run(["mariadb", "--no-defaults", f"--socket={self.socket}", "-u", "root",
                               "-N", "-e", statement], capture_output=True, text=True,
                              timeout=timeout_s, check=False)

    def db_ready(self) -> bool:
        return self.socket.exists() and self.sql("SELECT 1", 10.0).returncode == 0

    def create_db_user(self) -> None:
        """The database and the account slurmdbd uses (TCP from 127.0.0.1, with a password)."""
        proc = self.sql(
            f"CREATE DATABASE IF NOT EXISTS {DB_NAME}; "
            f"CREATE OR REPLACE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{self.password}'; "
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;")
        if proc.returncode != 0:
            raise AccountingError(f"creating the slurmdbd database user failed: {proc.stderr}")

    def render_dbd_conf(self, munge_socket: Path) -> str:
        return "\n".join([
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge_socket}",
            "DbdHost=localhost",
            f"DbdAddr={self.dbd_addr}",
            f"DbdPort={self.dbd_port}",
            "SlurmUser=root",
            "DebugLevel=info",
            f"LogFile={self.dbd_log}",
            f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.db_port}",
            f"StorageUser={DB_USER}",
            f"StoragePass={self.password}",
            f"StorageLoc={DB_NAME}",
        ]) + "\n"

    def write_dbd_conf(self, munge_socket: Path) -> None:
        """slurmdbd refuses a config that others may read: write it with mode 0600."""
        self.dbd_conf.parent.mkdir(parents=True, exist_ok=True)
        self.dbd_conf.touch(mode=0o600)
        self.dbd_conf.chmod(0o600)
        self.dbd_conf.write_text(self.render_dbd_conf(munge_socket))

    @staticmethod
    def dbd_ready(env: dict[str, str]) -> bool:
        proc = subprocess.run(["sacctmgr", "-n", "-P", "list", "cluster"], env=env,
                              capture_output=True, text=True, timeout=20, check=False)
        return proc.returncode == 0

    @staticmethod
    def register(env: dict[str, str], cluster: str, account: str,
                 user: str | None = None) -> None:
        """Cluster, account and user (default: whoever runs this) in the accounting database."""
        user = user or getpass.getuser()
        steps = [["add", "cluster", cluster],
                 ["add", "account", account, f"Cluster={cluster}",
                  "Description=d5pipe test account", "Organization=d5pipe"],
                 ["add", "user", user, f"Account={account}", f"DefaultAccount={account}",
                  f"Cluster={cluster}"]]
        for step in steps:
            proc = subprocess.run(["sacctmgr", "-i", *step], env=env, capture_output=True,
                                  text=True, timeout=60, check=False)
            # a restart on the same state dir finds them registered: sacctmgr then exits 1
            said = proc.stdout + proc.stderr
            if proc.returncode != 0 and not ("already exists" in said
                                             or "Nothing new added" in said):
                raise AccountingError(f"sacctmgr -i {' '.join(step)} failed: "
                                      f"{proc.stdout}{proc.stderr}")

    @staticmethod
    def limit_user(env: dict[str, str], cluster: str, user: str | None = None,
                   **limits: int) -> None:
        """Set association limits of ``user`` (default: whoever runs this) on ``cluster``, e.g.
        ``MaxSubmitJobs=30``; slurmctld enforces them with ``AccountingStorageEnforce=limits``."""
        user = user or getpass.getuser()
        sets = [f"{name}={value}" for name, value in limits.items()]
        argv = ["sacctmgr", "-i", "modify", "user", "where", f"name={user}",
                f"cluster={cluster}", "set", *sets]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              check=False)
        if proc.returncode != 0:
            raise AccountingError(f"{' '.join(argv)} failed: {proc.stdout}{proc.stderr}")
