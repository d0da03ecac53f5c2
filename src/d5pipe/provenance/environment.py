"""Environment record, environment hash, and the explanation of what differs between two records.

:func:`environment_record` returns a JSON-serialisable dict (``schema_version`` 1) describing the
software and hardware a run used: Python, every installed distribution (and, as ``lock``, where each
came from: d5pipe.provenance.lock, what ``reproduce --rebuild-env`` rebuilds), the torch build and thread
settings, the MPI library behind mpi4py (the probes are in :mod:`d5pipe.provenance.probes`), Horovod's build flags, CPU, GPUs and driver, OS and kernel,
hostname, selected environment variables (thread settings, CUDA_VISIBLE_DEVICES, SLURM job) and the
git commit of the d5pipe source tree with a sha256 of its uncommitted diff (``git diff HEAD``).
The record is computed once per process and cached (the expensive parts are the torch import,
one ``git`` call, one ``nvidia-smi`` call where present and one short subprocess that reads the MPI
library version without initialising MPI).

:func:`env_hash` is the first 16 hex characters of the sha256 of the canonical JSON
(:func:`d5pipe.core.canonical.canonical_json`) of the *hash subset*: the record entries named by
:data:`HASH_KEYS`, i.e. what can change results:

* ``python.version``, ``python.implementation``;
* ``packages`` (every distribution name -> version);
* ``torch.version``, ``torch.cuda``, ``torch.cudnn``, ``torch.nccl``, ``torch.hip``,
  ``torch.build_config`` (``torch.__config__.show()``), ``torch.num_threads``,
  ``torch.num_interop_threads``, ``torch.parallel_backend``;
* ``mpi.library``, ``mpi.standard``; ``horovod`` (build flags);
* ``cpu.model``, ``cpu.flags``; ``gpu.driver``, ``gpu.models``;
* ``os.system``, ``os.distro``, ``os.kernel``, ``os.machine``;
* the thread/determinism variables of :data:`HASHED_ENV_VARS` (``env.OMP_NUM_THREADS`` ...);
* ``git.commit``, ``git.diff_sha256``.

Not hashed (recorded only): hostname, process-level facts (executable path, CPU counts and
affinity), CUDA_VISIBLE_DEVICES, SLURM job variables, timestamps. Two shards of one run on two
identical nodes therefore get the same hash.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import tarfile
from pathlib import Path
from typing import Any

from d5pipe.core.canonical import digest
from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import compiler_info
from d5pipe.measure.energy import meter as energy_meter
from d5pipe.measure.process import boot_id
from d5pipe.provenance import probes as envprobe
from d5pipe.provenance.lock import current_lock, editable_commit, lock_record
from d5pipe.rundir.layout import MANIFEST_FILE, RunDir

ENV_SCHEMA_VERSION = 1
HASH_LENGTH = 16

HASHED_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "KMP_AFFINITY",
    "CUBLAS_WORKSPACE_CONFIG",
    "NCCL_ALGO",
    "NCCL_PROTO",
)
"""Environment variables that can change results; part of the hash."""

RECORDED_ENV_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_CPUS_PER_TASK",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_TASK",
)
"""Environment variables recorded for provenance; not part of the hash."""

HASH_KEYS: tuple[str, ...] = (
    "python.version",
    "python.implementation",
    "packages",
    "torch.version",
    "torch.cuda",
    "torch.cudnn",
    "torch.nccl",
    "torch.hip",
    "torch.build_config",
    "torch.num_threads",
    "torch.num_interop_threads",
    "torch.parallel_backend",
    "mpi.library",
    "mpi.standard",
    "horovod",
    "cpu.model",
    "cpu.flags",
    "gpu.driver",
    "gpu.models",
    "os.system",
    "os.distro",
    "os.kernel",
    "os.machine",
    "compiler.version",
    *(f"env.{name}" for name in HASHED_ENV_VARS),
    "git.commit",
    "git.diff_sha256",
)
"""Dotted record paths that make up the hash subset (see module docstring)."""

STATIC_PARTS: tuple[str, ...] = ("python", "packages", "lock", "torch", "horovod", "cpu", "gpu", "os", "mpi",
                                  "compiler")
"""Record parts that do not change between jobs on one host and one installation (cached)."""


def _fingerprint() -> str:
    """What the static parts depend on: host, boot, interpreter and the mtimes of its import
    directories (installing or removing a package changes its site-packages directory), less the
    working directory: a shard job's is the run directory, which changes as the run writes to it."""
    here = os.getcwd()
    paths = sorted({p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != here})
    return digest({"schema": ENV_SCHEMA_VERSION, "host": socket.gethostname(), "boot": boot_id(),
                   "exe": sys.executable, "paths": [(p, os.stat(p).st_mtime_ns) for p in paths]}, 16)


_EARLY_PROBE: list[Any] = []
"""An MPI probe started by :func:`start_probe` (at most one), taken by the first full record."""
_SETTLED_MPI: list[dict[str, Any] | None] = []
"""Its reading, once :func:`ready_for_forks` waited for it (a fork server's children take it)."""


def _static_cache_path(cache_dir: Path, light: bool) -> Path:
    return Path(cache_dir) / f"{'light-' if light else ''}{_fingerprint()}.json"


def start_probe() -> None:
    """Start the MPI probe now (once), for this process's first full record: it runs while the
    caller imports torch (the probe takes most of a second)."""
    if not _EARLY_PROBE and not _SETTLED_MPI:
        _EARLY_PROBE.append(envprobe.start_mpi_probe())


def prefetch(cache_dir: Path) -> None:
    """:func:`start_probe` when the full record's static parts are not cached yet (a shard job calls
    this first)."""
    if not _static_cache_path(cache_dir, light=False).exists():
        start_probe()


def ready_for_forks() -> None:
    """In a fork server, before its first fork: wait for the MPI probe (:func:`start_probe`) and
    read the git state of the source it imported and of the editable checkouts, so that each child
    takes these readings instead of running the subprocesses again. Subprocesses only: no torch
    operation, no thread left behind."""
    if _EARLY_PROBE:
        _SETTLED_MPI.append(envprobe.mpi_info(_EARLY_PROBE.pop()))
    _source_state()
    _EDITABLE_COMMITS.update((e.url, e.commit) for e in current_lock() if e.source == "editable")


@functools.lru_cache(maxsize=1)
def _source_state() -> str:
    """The git state of the d5pipe source this process runs, read once: a fork server's children run
    the code the server imported."""
    return json.dumps(envprobe.git_info())


_EDITABLE_COMMITS: dict[str, str] = {}
"""Editable checkouts' commits by URL, read once a process (as :func:`_source_state`)."""


def _editable_commit(url: str) -> str:
    if url not in _EDITABLE_COMMITS:
        _EDITABLE_COMMITS[url] = editable_commit(url)
    return _EDITABLE_COMMITS[url]


def _static_parts(light: bool) -> dict[str, Any]:
    settled = not light and bool(_SETTLED_MPI)
    probe = None if light or settled else (_EARLY_PROBE.pop() if _EARLY_PROBE else envprobe.start_mpi_probe())
    parts: dict[str, Any] = {
        "python": envprobe.python_info(),
        "packages": envprobe.packages(),
        "lock": lock_record(),
        "torch": envprobe.torch_info(light=light),
        "horovod": envprobe.horovod_info(light=light),
        "cpu": envprobe.cpu_info(),
        "gpu": envprobe.gpu_info(),
        "os": envprobe.os_info(),
        "compiler": compiler_info(),  # what torch.compile and compiled operators build with
    }
    parts["mpi"] = (envprobe.mpi_metadata() if light else _SETTLED_MPI[0] if settled
                    else envprobe.mpi_info(probe))
    return parts


def _cached_static(cache_dir: Path | None, light: bool) -> dict[str, Any]:
    if cache_dir is None:
        return _static_parts(light)
    path = _static_cache_path(cache_dir, light)
    try:
        cached: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if set(cached) == set(STATIC_PARTS):
            return cached
    except (OSError, ValueError):
        pass
    parts = _static_parts(light)
    from d5pipe.core.atomic import write_text

    write_text(path, json.dumps(parts, sort_keys=True), durable=False)
    return parts


@functools.lru_cache(maxsize=4)
def _cached_record(cache_dir: str | None, light: bool) -> str:
    record: dict[str, Any] = {"schema_version": ENV_SCHEMA_VERSION,
                              **_cached_static(Path(cache_dir) if cache_dir else None, light)}
    for entry in (record.get("lock") or {}).get("entries") or []:  # a checkout's commit moves between jobs
        if entry.get("source") == "editable":
            entry["commit"] = _editable_commit(str(entry.get("url", "")))
    torch = sys.modules.get("torch")
    if isinstance(record.get("torch"), dict) and torch is not None:  # threads: per job, from this process
        record["torch"].update(num_threads=torch.get_num_threads(),
                               num_interop_threads=torch.get_num_interop_threads())
    record.update(
        energy=energy_meter("cpu").describe(),  # per job: a node may let its jobs read RAPL or not
        hostname=socket.gethostname(),
        env={k: os.environ.get(k) for k in (*HASHED_ENV_VARS, *RECORDED_ENV_VARS)},
        git=json.loads(_source_state()),
    )
    return json.dumps(record, sort_keys=True)


def environment_record(cache_dir: Path | None = None, light: bool = False) -> dict[str, Any]:
    """The environment of this process (computed once per process, then a fresh copy).

    ``cache_dir`` (a run's ``env/cache``): the parts that do not vary between jobs on one host
    and installation (:data:`STATIC_PARTS`) are read from there when their fingerprint matches,
    so a shard job pays milliseconds instead of the torch/Horovod/MPI probes; what varies per job
    (threads, hostname, environment variables, SLURM job, git state) is always read afresh.
    ``light``: describe torch and Horovod from their installed metadata without importing them
    (the submitting ``d5pipe run``, which imports neither).
    """
    return json.loads(_cached_record(str(cache_dir) if cache_dir else None, light))


def _lookup(record: dict[str, Any], dotted: str) -> Any:
    cur: Any = record
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def hash_subset(record: dict[str, Any]) -> dict[str, Any]:
    """The part of ``record`` that :func:`env_hash` covers: {dotted key: value} for HASH_KEYS."""
    return {key: _lookup(record, key) for key in HASH_KEYS}


def env_hash(record: dict[str, Any] | None = None) -> str:
    """16-hex-character hash of the hash subset of ``record`` (default: this process)."""
    return digest(hash_subset(environment_record() if record is None else record), HASH_LENGTH)


def is_hash_relevant(dotted: str) -> bool:
    return any(dotted == key or dotted.startswith(key + ".") for key in HASH_KEYS)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": leaf}`` (an empty dict is a leaf): what two records' diffs compare."""
    if isinstance(obj, dict) and obj:
        return {k: v for key, value in obj.items()
                for k, v in flatten(value, f"{prefix}.{key}" if prefix else str(key)).items()}
    return {prefix: obj}


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _explain(key: str, a: Any, b: Any) -> str:
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        added = sorted(set(b) - set(a))
        removed = sorted(set(a) - set(b))
        parts = [f"+{x}" for x in added] + [f"-{x}" for x in removed]
        if parts:
            return f"{key}: {' '.join(parts)}"
    if a is None:
        return f"{key}: added {_short(b)}"
    if b is None:
        return f"{key}: removed (was {_short(a)})"
    return f"{key}: {_short(a)} -> {_short(b)}"


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    """``(dotted key, "key: old -> new")`` for each leaf that differs between two nested dicts
    (records or configs), sorted by key."""
    fa, fb = flatten(a), flatten(b)
    return [(key, _explain(key, fa.get(key), fb.get(key)))
            for key in sorted(set(fa) | set(fb)) if fa.get(key) != fb.get(key)]


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per difference between two records; differences that change the hash come first."""
    relevant: list[str] = []
    other: list[str] = []
    for key, line in differences(a, b):
        if key == "schema_version" or key.startswith("lock."):  # packages and git say it
            continue
        if is_hash_relevant(key):
            relevant.append(line + "  [hash]")
        else:
            other.append(line)
    return relevant + other


MANIFEST_ENV_KEYS = ("environment", "submit_environment")
"""Records a manifest holds: where the result rows were measured (the shard processes; Snakemake
sets their thread variables), and the process that ran ``d5pipe run``."""


def record_from_manifest(manifest: dict[str, Any], source: str, key: str = "environment") -> dict[str, Any]:
    """The environment record under ``key`` of a manifest, or the dict itself if it is a record."""
    if key not in MANIFEST_ENV_KEYS:
        raise D5PipeError(f"{source}: unknown environment key {key!r} (one of {', '.join(MANIFEST_ENV_KEYS)})")
    env = manifest.get(key)
    if isinstance(env, dict):
        return env
    if "packages" in manifest and "python" in manifest:
        return manifest
    raise D5PipeError(f"{source}: no {key!r} record in this manifest/record")


def load_record(path: Path, key: str = "environment") -> dict[str, Any]:
    """Environment record from a manifest.json, an environment JSON, a run dir or a .tar.gz bundle.

    ``key`` picks the manifest's record: ``environment`` (the measurements) or ``submit_environment``.
    """
    path = Path(path)
    if path.is_dir():
        path = RunDir.of(path).manifest_path
    if not path.exists():
        raise D5PipeError(f"{path}: not found")
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path, "r:*") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.split("/")[-1] == MANIFEST_FILE]
                members.sort(key=lambda m: m.name.count("/"))
                if not members:
                    raise D5PipeError(f"{path}: bundle has no manifest.json")
                fh = tar.extractfile(members[0])
                assert fh is not None
                data = json.loads(fh.read().decode("utf-8"))
        except tarfile.TarError as exc:
            raise D5PipeError(f"{path}: not a readable tar archive ({exc})") from exc
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise D5PipeError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise D5PipeError(f"{path}: expected a JSON object")
    return record_from_manifest(data, str(path), key)
