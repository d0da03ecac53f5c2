"""A bundle's Python environment, rebuilt from its lock (issue 41): ``d5pipe env --check BUNDLE`` and
``d5pipe reproduce BUNDLE --rebuild-env``.

Every environment record carries the lock of its interpreter (``lock``: d5pipe.provenance.lock). The
rebuilt environment is a virtual environment **layered on the invoking one**: a ``.pth`` file puts
the invoking environment's site-packages behind the new one's own, and every locked distribution
that the invoking environment does not hold at the same version and source is installed into the
new one (``pip install --no-deps --ignore-installed``: the invoking environment is never touched),
where it shadows the other. Distributions the two share are reused, not copied, so a rebuild
installs only what differs; the files distributions put beside site-packages (Open MPI's libraries
and launchers) are linked, so mpi4py finds its library under the new prefix. Only wheels are
installed from an index (``--only-binary :all:``): a lock read from a bundle never runs a build
script, and the bundle's checksums are verified before anything is installed. An editable checkout
(d5pipe itself, a user's package) locked at another git commit is cloned from this environment's
checkout of it at that commit (``git clone --shared``: the checkout is left unchanged) into the new
environment and installed editable there, so the bundle's own code runs; a commit the checkout does
not hold is a refusal (fetch it first).

Before anything is built, one line and exit 2 (:class:`D5PipeError`) for what cannot work: another
interpreter minor version (a virtual environment cannot change the interpreter), a locked local
archive that is gone, a locked distribution that no index provides (pip's resolution fails: nothing
of the half-built environment is left). After the install the new environment's own lock is
compared with the bundle's: every locked distribution must be there at its version, else the
environment is removed and the difference named.

Environments are cached under ``envs/<key>`` of the user cache (d5pipe.core.user_dirs;
``D5PIPE_ENV_CACHE``), the key a hash of the locked distributions, the interpreter and the invoking environment they are layered on:
reproducing ten bundles of one stack builds it once. A cached environment is checked again before
each use (its lock against the bundle's) and rebuilt when it no longer matches.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from filelock import FileLock

from d5pipe.core.canonical import digest
from d5pipe.core.errors import D5PipeError
from d5pipe.core.user_dirs import user_cache_dir
from d5pipe.provenance.environment import load_record
from d5pipe.provenance.lock import Locked, current_lock, entries_of

META = "d5pipe-env.json"


@dataclass
class Gap:
    """How this interpreter's environment differs from a lock, and whether a rebuild closes it."""

    python: tuple[str, str]
    """(the lock's interpreter version, this one's)."""
    differ: list[tuple[Locked, Locked | None]] = field(default_factory=list)
    """(locked, here or None when missing here) for every locked distribution held otherwise here."""
    extra: list[Locked] = field(default_factory=list)
    """Here but not in the lock (visible in a layered environment too)."""
    blockers: list[str] = field(default_factory=list)
    """Why a rebuild cannot close the gap (one line each)."""

    def lines(self) -> list[str]:
        out = []
        if self.python[0] != self.python[1]:
            out.append(f"python: bundle {self.python[0]}, here {self.python[1]}")
        for locked, here in self.differ:
            have = f"{here.version} ({here.source})" if here else "missing"
            if locked.source == "editable" and here is not None and here.source == "editable":
                have += f", git {here.commit[:12] or '?'} against the bundle's {locked.commit[:12]}"
            out.append(f"{locked.name}: bundle {locked.version} ({locked.source}), here {have}")
        out += [f"{e.name}: here {e.version}, not in the bundle's lock" for e in self.extra]
        return out


def bundle_lock(bundle: Path, required: bool = True) -> tuple[dict[str, Any], list[Locked], str]:
    """``bundle``'s measurement record, the lock it carries and that lock's interpreter version; a
    bundle made before records carried locks is a :class:`D5PipeError` (``required``) or ``[]``."""
    record = load_record(bundle, "environment")
    locked = entries_of(record)
    if required and not locked:
        raise D5PipeError(f"{bundle}: its environment record has no lock (made before d5pipe recorded one): "
                          "there is nothing to rebuild from")
    return record, locked, str((record.get("lock") or {}).get("python", ""))


def _same(a: Locked, b: Locked) -> bool:
    if a.source == "editable" or b.source == "editable":  # a checkout is the same at the same commit
        return (a.version, a.source) == (b.version, b.source) and (a.commit == b.commit or not a.commit)
    if {a.source, b.source} <= {"index", "local"}:  # a local build is pinned for an index to provide
        return a.version == b.version
    return (a.version, a.source, a.url, a.commit) == (b.version, b.source, b.url, b.commit)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def gap(locked: list[Locked], python: str, here: list[Locked] | None = None) -> Gap:
    """What differs between ``locked`` (made with Python ``python``) and this environment."""
    mine = {e.name: e for e in (current_lock() if here is None else here)}
    wanted = {e.name for e in locked}
    found = Gap((python, platform.python_version()))
    found.differ = [(e, mine.get(e.name)) for e in locked if e.name not in mine or not _same(e, mine[e.name])]
    found.extra = [e for name, e in mine.items() if name not in wanted]
    if _minor(python) != _minor(platform.python_version()):
        found.blockers.append(f"the bundle's lock was made with Python {python}, this interpreter is "
                              f"{platform.python_version()}: a virtual environment cannot change it")
    for e, _ in found.differ:
        if e.source == "url" and e.url.startswith("file:") and not Path(e.url.removeprefix("file://")).exists():
            found.blockers.append(f"{e.name} {e.version}: its locked archive {e.url} is gone")
        if e.source == "editable" and checkout_of(e, mine.get(e.name)) is None:
            found.blockers.append(f"{e.name} {e.version}: its checkout at git {e.commit[:12] or '?'} is not in "
                                  f"this environment's checkout of it (fetch that commit there)")
    return found


def checkout_of(locked: Locked, here: Locked | None) -> Path | None:
    """The git repository of this environment's editable checkout of ``locked``'s distribution if it
    holds ``locked``'s commit (a rebuild clones the checkout from it), else None."""
    if here is None or here.source != "editable" or not locked.commit:
        return None
    repo = Path(unquote(urlparse(here.url).path))
    probe = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{locked.commit}^{{commit}}"],
                           capture_output=True, check=False)
    return repo if probe.returncode == 0 else None


def requirement(e: Locked) -> str:
    """The pip requirement that installs ``e`` as locked."""
    if e.source == "vcs" or (e.source == "url" and not e.sha256):
        return f"{e.name} @ {e.url}"
    if e.source == "url":
        return f"{e.name} @ {e.url}#sha256={e.sha256}"
    return f"{e.name}=={e.version}"


def cache_root() -> Path:
    return Path(os.environ.get("D5PIPE_ENV_CACHE") or user_cache_dir() / "envs")


def _base_site_dirs() -> list[str]:
    """The invoking environment's site directories, its own and those it is layered on (the
    layers a rebuilt environment sees), in import order."""
    dirs = [*site.getsitepackages(), *(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))]
    return [d for d in dict.fromkeys(os.path.realpath(d) for d in dirs) if os.path.isdir(d)]  # lib64 -> lib: once


def env_key(locked: list[Locked], python: str) -> str:
    return digest({"entries": [(e.name, e.version, e.source, e.url, e.sha256) if e.source != "editable"
                               else (e.name, e.version, e.source, e.commit) for e in locked],
                   "python": _minor(python), "base": [sys.prefix, *_base_site_dirs()]}, 16)


@dataclass(frozen=True)
class Rebuilt:
    """A rebuilt environment: its interpreter, whether this call built it, and how long it took."""

    python: Path
    built: bool
    seconds: float
    installed: list[str]
    built_s: float
    """How long building it took (now, or when it was built)."""


def _env_python(env: Path) -> Path:
    return env / "bin" / "python"


def _lock_inside(python: Path) -> list[Locked]:
    code = ("import dataclasses, json; from d5pipe.provenance.lock import current_lock; "
            "print(json.dumps([dataclasses.asdict(e) for e in current_lock()]))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise D5PipeError(f"reproduce --rebuild-env: the environment at {python.parent.parent} does not start: "
                          f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return [Locked(**e) for e in json.loads(out.stdout)]


def _missing_inside(locked: list[Locked], python: Path) -> list[str]:
    inside = {e.name: e for e in _lock_inside(python)}
    return [f"{e.name} {e.version} (has {inside[e.name].version if e.name in inside else 'none'})"
            for e in locked if e.name not in inside or not _same(e, inside[e.name])]


def _pip_failure(stderr: str) -> str:
    """The one line of pip's output that names what failed."""
    for pattern in (r"No matching distribution found for ([^\s]+)", r"Could not find a version that satisfies "
                    r"the requirement ([^\s]+)"):
        hit = re.search(pattern, stderr)
        if hit:
            return f"{hit.group(1)} (in the bundle's lock) is not on the package index"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("ERROR")] or stderr.strip().splitlines()
    return lines[-1] if lines else "pip failed"


def _is_python_script(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def _link_base_files(env: Path) -> None:
    """What distributions put beside site-packages in the invoking environment (Open MPI's
    ``lib/libmpi.so``, ``bin/mpirun``, ``etc``, ``share``): linked into the new environment, whose
    ``sys.prefix`` is where mpi4py and the launchers look. Python scripts are not linked (their
    first line names the other interpreter)."""
    prefixes = dict.fromkeys(Path(d).parents[2] for d in _base_site_dirs() if len(Path(d).parents) > 2)
    for base in prefixes:  # the first layer that has a file wins, as on sys.path
        for top in ("bin", "lib", "lib64", "etc", "share", "include"):
            if not (base / top).is_dir() or (base / top).is_symlink():
                continue
            (env / top).mkdir(exist_ok=True)
            for item in (base / top).iterdir():
                target = env / top / item.name
                if item.name.startswith("python") or target.exists() or target.is_symlink():
                    continue
                if top == "bin" and (item.name.startswith(("activate", "Activate", "pip")) or _is_python_script(item)):
                    continue
                target.symlink_to(item)


def _checkout(env: Path, locked: Locked, here: Locked | None) -> Path:
    """A clone of this environment's checkout at the bundle's commit, inside ``env`` (objects shared
    with the checkout, which is left unchanged), for pip to install editable."""
    repo = checkout_of(locked, here)
    assert repo is not None  # gap() made it a blocker otherwise
    target = env / "src" / locked.name
    for command in (["git", "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(target)],
                    ["git", "-C", str(target), "checkout", "--quiet", "--detach", locked.commit]):
        subprocess.run(command, check=True, capture_output=True)
    return target


def _build(env: Path, locked: list[Locked], found: Gap) -> list[str]:
    """Create the layered environment at ``env`` (a fresh directory) and install what differs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True)
    own = next((env / "lib").glob("python*/site-packages"))
    layers = "".join(f"import site; site.addsitedir({d!r})\n" for d in _base_site_dirs())
    (own / "_d5pipe_base_environment.pth").write_text(layers, encoding="utf-8")
    wheels = [requirement(e) for e, _ in found.differ if e.source != "editable"]
    checkouts = [_checkout(env, e, here) for e, here in found.differ if e.source == "editable"]
    pip = [sys.executable, "-m", "pip", "--python", str(_env_python(env)), "install", "-q", "--no-deps",
           "--ignore-installed", "--no-warn-conflicts", "--disable-pip-version-check"]
    for extra in ([["--only-binary", ":all:", *wheels]] if wheels else []) + [["-e", str(c)] for c in checkouts]:
        out = subprocess.run([*pip, *extra], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise D5PipeError(f"reproduce --rebuild-env: {_pip_failure(out.stderr)}")
    _link_base_files(env)
    wrong = _missing_inside(locked, _env_python(env))
    if wrong:
        raise D5PipeError(f"reproduce --rebuild-env: the rebuilt environment does not hold the locked "
                          f"{', '.join(wrong[:3])}")
    return [*wheels, *(f"{e.name} at git {e.commit[:12]}" for e, _ in found.differ if e.source == "editable")]


def rebuild(locked: list[Locked], python: str) -> Rebuilt:
    """The environment of ``locked`` (built, or taken from the cache and checked), see the module docstring."""
    started = time.perf_counter()
    found = gap(locked, python)
    if found.blockers:
        raise D5PipeError(f"reproduce --rebuild-env: {found.blockers[0]}")
    final = cache_root() / env_key(locked, python)
    final.parent.mkdir(parents=True, exist_ok=True)
    # built where it stays (a venv's scripts and editable installs name their own path); one build at a time
    with FileLock(f"{final}.lock"):
        if (final / META).exists():
            meta = json.loads((final / META).read_text(encoding="utf-8"))
            if not _missing_inside(locked, _env_python(final)):
                return Rebuilt(_env_python(final), False, time.perf_counter() - started, list(meta["installed"]),
                               float(meta["built_s"]))
        shutil.rmtree(final, ignore_errors=True)  # stale (its base changed) or left half-built by a crash
        try:
            installed = _build(final, locked, found)
            seconds = time.perf_counter() - started
            (final / META).write_text(json.dumps({"installed": installed, "built_s": seconds, "python": python,
                                                  "base": sys.prefix}), encoding="utf-8")  # last: complete
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)  # nothing half-built is left behind
            raise
    return Rebuilt(_env_python(final), True, seconds, installed, seconds)
