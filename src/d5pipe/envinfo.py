"""Environment record, environment hash, and the explanation of what differs between two records.

:func:`environment_record` returns a JSON-serialisable dict (``schema_version`` 1) describing the
software and hardware a run used: Python, every installed distribution, the torch build and thread
settings, the MPI library behind mpi4py, Horovod's build flags, CPU, GPUs and driver, OS and kernel,
hostname, selected environment variables (thread settings, CUDA_VISIBLE_DEVICES, SLURM job) and the
git commit of the d5pipe source tree with a sha256 of its uncommitted diff (``git diff HEAD``).
The record is computed once per process and cached (the expensive parts are the torch import,
one ``git`` call, one ``nvidia-smi`` call where present and one short subprocess that reads the MPI
library version without initialising MPI).

:func:`env_hash` is the first 16 hex characters of the sha256 of the canonical JSON
(:func:`d5pipe.canonical.canonical_json`) of the *hash subset*: the record entries named by
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
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from d5pipe.canonical import digest
from d5pipe.errors import D5PipeError

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
    *(f"env.{name}" for name in HASHED_ENV_VARS),
    "git.commit",
    "git.diff_sha256",
)
"""Dotted record paths that make up the hash subset (see module docstring)."""

_SUBPROCESS_TIMEOUT_S = 20.0
_MPI_PROBE = (
    "import json, mpi4py\n"
    "mpi4py.rc.initialize = False\n"
    "mpi4py.rc.finalize = False\n"
    "from mpi4py import MPI\n"
    "print(json.dumps({'mpi4py': mpi4py.__version__,"
    " 'library': MPI.Get_library_version().replace(chr(0), '').strip(),"
    " 'standard': '%d.%d' % MPI.Get_version()}))\n"
)


def _python_info() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "compiler": platform.python_compiler(),
        "executable": sys.executable,
    }


def _packages() -> dict[str, str]:
    """Installed distributions (normalised name -> version); the first on sys.path wins."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        found.setdefault(key, dist.version)
    return dict(sorted(found.items()))


def _torch_info() -> dict[str, Any] | None:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch as _torch

    torch: Any = _torch  # parts of torch's API are untyped
    nccl: str | None = None
    try:
        if torch.cuda.is_available():
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - NCCL absent from this build
        nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    parallel = torch.__config__.parallel_info()
    backend = next(
        (ln.split(":", 1)[1].strip() for ln in parallel.splitlines() if "parallel backend" in ln), None
    )
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn is not None else None,
        "nccl": nccl,
        "hip": getattr(torch.version, "hip", None),
        "debug": bool(torch.version.debug),
        "build_config": torch.__config__.show(),
        "parallel_info": parallel,
        "parallel_backend": backend,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "mkl": bool(torch.backends.mkl.is_available()),
        "openmp": bool(torch.backends.openmp.is_available()),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }


def _start_mpi_probe() -> subprocess.Popen[str] | None:
    """Read the MPI library version in a child process, so this process never initialises MPI."""
    if "mpi4py.MPI" in sys.modules or importlib.util.find_spec("mpi4py") is None:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _MPI_PROBE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _mpi_info(probe: subprocess.Popen[str] | None) -> dict[str, Any] | None:
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None:  # already imported by the caller: reading the version needs no init
        import mpi4py

        major, minor = mod.Get_version()
        return {
            "mpi4py": mpi4py.__version__,
            "library": mod.Get_library_version().replace("\x00", "").strip(),
            "standard": f"{major}.{minor}",
        }
    if probe is None:
        return None
    try:
        out, _ = probe.communicate(timeout=_SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        return {"mpi4py": None, "library": None, "standard": None, "error": "probe timed out"}
    if probe.returncode != 0:
        return {"mpi4py": None, "library": None, "standard": None, "error": "mpi4py import failed"}
    info: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return info


def _horovod_info() -> dict[str, Any] | None:
    if importlib.util.find_spec("horovod") is None:
        return None
    try:
        import horovod.torch as hvd  # imported lazily; does not initialise Horovod
    except Exception as exc:  # noqa: BLE001 - a broken Horovod build is a fact to record
        return {"error": f"{type(exc).__name__}: {exc}"}
    flags: dict[str, Any] = {"version": getattr(sys.modules.get("horovod"), "__version__", None)}
    for name in ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built"):
        fn = getattr(hvd, name, None)
        if fn is not None:
            try:
                flags[name] = bool(fn())
            except Exception:  # noqa: BLE001
                flags[name] = None
    return flags


def _cpu_info() -> dict[str, Any]:
    model = platform.processor() or None
    flags: list[str] = []
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    phys = core = ""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and model in (None, "", platform.machine()):
            model = value
        elif key in ("flags", "Features") and not flags:
            flags = sorted(set(value.split()))
        elif key == "physical id":
            phys = value
            sockets.add(value)
        elif key == "core id":
            core = value
            cores.add((phys, core))
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "model": model,
        "flags": flags,
        "logical_cpus": os.cpu_count(),
        "physical_cores": len(cores) or None,
        "sockets": len(sockets) or None,
        "affinity_cpus": affinity,
    }


def _gpu_info() -> dict[str, Any] | None:
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            res = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT_S, check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            res = None
        if res is not None and res.returncode == 0 and res.stdout.strip():
            devices = []
            for line in res.stdout.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 3:
                    devices.append({"name": parts[0], "driver": parts[1], "memory_mib": parts[2]})
            if devices:
                return {
                    "source": "nvidia-smi",
                    "driver": devices[0]["driver"],
                    "models": [d["name"] for d in devices],
                    "devices": devices,
                }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return {"source": "torch.cuda", "driver": None, "models": names, "devices": [{"name": n} for n in names]}
    return None


def _os_info() -> dict[str, Any]:
    distro = None
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {
        "system": platform.system(),
        "distro": distro,
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
    }


def source_root() -> Path:
    """The directory that holds d5pipe's sources (the repository root for an editable install)."""
    return Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        return subprocess.run(
            [git, "-C", str(root), *args], capture_output=True, timeout=_SUBPROCESS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def git_info(root: Path | None = None) -> dict[str, Any] | None:
    """Commit and sha256 of ``git diff HEAD`` of the d5pipe source tree; None outside a git tree."""
    root = source_root() if root is None else root
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        return None
    if Path(top.stdout.decode().strip()).resolve() != root.resolve():
        return None  # an installed copy inside some other repository: not our source tree
    head = _git(root, "rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return {"root": str(root), "commit": None, "dirty": None, "diff_sha256": None}
    diff = _git(root, "diff", "HEAD", "--no-color", "--no-ext-diff", "--binary")
    diff_bytes = diff.stdout if diff is not None and diff.returncode == 0 else b""
    return {
        "root": str(root),
        "commit": head.stdout.decode().strip(),
        "dirty": bool(diff_bytes),
        "diff_sha256": hashlib.sha256(diff_bytes).hexdigest() if diff_bytes else None,
    }


@functools.lru_cache(maxsize=1)
def _cached_record() -> str:
    probe = _start_mpi_probe()  # runs while torch is imported
    record: dict[str, Any] = {
        "schema_version": ENV_SCHEMA_VERSION,
        "python": _python_info(),
        "packages": _packages(),
        "torch": _torch_info(),
        "horovod": _horovod_info(),
        "cpu": _cpu_info(),
        "gpu": _gpu_info(),
        "os": _os_info(),
        "hostname": socket.gethostname(),
        "env": {k: os.environ.get(k) for k in (*HASHED_ENV_VARS, *RECORDED_ENV_VARS)},
        "git": git_info(),
    }
    record["mpi"] = _mpi_info(probe)
    return json.dumps(record, sort_keys=True)


def environment_record() -> dict[str, Any]:
    """The environment of this process (computed once per process, then a fresh copy)."""
    record: dict[str, Any] = json.loads(_cached_record())
    return record


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


def current_env_hash() -> str:
    """env_hash of this process, cached with the record."""
    return env_hash(environment_record())


def is_hash_relevant(dotted: str) -> bool:
    return any(dotted == key or dotted.startswith(key + ".") for key in HASH_KEYS)


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
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


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per difference between two records; differences that change the hash come first."""
    fa, fb = _flatten(a), _flatten(b)
    keys = sorted(set(fa) | set(fb))
    relevant: list[str] = []
    other: list[str] = []
    for key in keys:
        va, vb = fa.get(key), fb.get(key)
        if va == vb or key == "schema_version":
            continue
        if is_hash_relevant(key):
            relevant.append(_explain(key, va, vb) + "  [hash]")
        else:
            other.append(_explain(key, va, vb))
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
        path = path / "manifest.json"
    if not path.exists():
        raise D5PipeError(f"{path}: not found")
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path, "r:*") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.split("/")[-1] == "manifest.json"]
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
