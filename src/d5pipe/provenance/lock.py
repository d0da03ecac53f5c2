"""An installable lock of this Python environment: ``d5pipe env --lock`` (issue 41, first part).

Each distribution is listed once (the first on ``sys.path`` wins, as in the environment record)
with where it came from, read from its ``direct_url.json`` (PEP 610):

* ``index`` (no ``direct_url.json``): from a package index or a find-links directory, pinned
  ``name==version``;
* ``editable``: ``-e PATH``, with the git commit of that checkout when it is one;
* ``vcs``: ``name @ git+URL@COMMIT``;
* ``url``: ``name @ URL``, with the archive's sha256 where pip recorded it;
* ``local``: built from a local directory that need not exist any more -- pinned ``name==version``
  for an index to provide, and said so in a comment.

The text is a pip requirements file (``pip install -r``), its header naming the interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from d5pipe.provenance.probes import _git, distributions

LOCK_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Locked:
    """One distribution and where it came from."""

    name: str
    version: str
    source: str
    """``index``, ``editable``, ``vcs``, ``url`` or ``local`` (module docstring)."""
    url: str = ""
    commit: str = ""
    sha256: str = ""

    def line(self) -> str:
        """Its requirement line (with a comment where the lock cannot say everything)."""
        if self.source == "editable":
            path = unquote(urlparse(self.url).path) if self.url.startswith("file:") else self.url
            return f"-e {path}" + (f"  # {self.name} {self.version}, git {self.commit}" if self.commit else "")
        if self.source == "vcs":
            return f"{self.name} @ {self.url}@{self.commit}" if self.commit else f"{self.name} @ {self.url}"
        if self.source == "url":
            return f"{self.name} @ {self.url}" + (f" --hash=sha256:{self.sha256}" if self.sha256 else "")
        pin = f"{self.name}=={self.version}"
        return pin + (f"  # built here from {self.url}: an index must provide it" if self.source == "local" else "")


def _source(dist: importlib.metadata.Distribution, name: str, version: str) -> Locked:
    text = dist.read_text("direct_url.json")
    if not text:
        return Locked(name, version, "index")
    try:
        info = json.loads(text)
    except ValueError:
        return Locked(name, version, "index")
    url = str(info.get("url", ""))
    if "vcs_info" in info:
        vcs = info["vcs_info"]
        return Locked(name, version, "vcs", f"{vcs.get('vcs', 'git')}+{url}", str(vcs.get("commit_id", "")))
    if "archive_info" in info:
        archive = info["archive_info"]
        digest = str(archive.get("hashes", {}).get("sha256") or str(archive.get("hash", "")).removeprefix("sha256="))
        return Locked(name, version, "url", url, sha256=digest if len(digest) == 64 else "")
    if info.get("dir_info", {}).get("editable"):
        return Locked(name, version, "editable", url, editable_commit(url))
    return Locked(name, version, "local", url)


def editable_commit(url: str) -> str:
    """The git commit of an editable checkout (``file:`` URL), or "" when it is none."""
    path = Path(unquote(urlparse(url).path))
    head = _git(path, "rev-parse", "HEAD") if path.is_dir() else None
    return head.stdout.decode().strip() if head is not None and head.returncode == 0 else ""


def lock_record(entries: list[Locked] | None = None) -> dict[str, object]:
    """The lock as the environment record carries it (``lock``): interpreter and entries."""
    return {"schema_version": LOCK_SCHEMA_VERSION, "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "entries": [dataclasses.asdict(e) for e in (current_lock() if entries is None else entries)]}


def entries_of(record: dict[str, object]) -> list[Locked]:
    """The entries of a record's ``lock`` ([] for records made before locks)."""
    lock = record.get("lock")
    if not isinstance(lock, dict):
        return []
    return [Locked(**{k: str(v) for k, v in e.items()}) for e in lock.get("entries") or [] if isinstance(e, dict)]


def current_lock() -> list[Locked]:
    """This interpreter's distributions, sorted by name (the first of a name on sys.path)."""
    return [_source(dist, name, version) for name, (version, dist) in distributions().items()]


def lock_text(entries: list[Locked]) -> str:
    """The requirements file of ``entries``, with a header naming the interpreter."""
    head = [f"# d5pipe environment lock (schema {LOCK_SCHEMA_VERSION}): "
            f"{platform.python_implementation()} {platform.python_version()} on {platform.machine()}",
            f"# {len(entries)} distributions; install with: pip install -r THIS_FILE"]
    return "\n".join([*head, *(e.line() for e in entries)]) + "\n"
