"""Probes of the environment record (:mod:`d5pipe.provenance.environment`): one function per part of the record.

Each returns plain JSON data, or None where the part does not apply (no torch, no MPI, no GPU, no
git). The slow ones are bounded: subprocesses (``nvidia-smi``, ``git``, the MPI library probe that
reads the version without initialising MPI) time out after 20 s.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from d5pipe.core.toolchain import run_tool

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


def python_info() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "compiler": platform.python_compiler(),
        "executable": sys.executable,
    }


def distributions() -> dict[str, tuple[str, importlib.metadata.Distribution]]:
    """Installed distributions, normalised name -> (version, distribution), sorted by name; the
    first of a name on sys.path wins (the one that imports)."""
    found: dict[str, tuple[str, importlib.metadata.Distribution]] = {}
    for dist in importlib.metadata.distributions():
        name, version = _name_version(dist)
        if not name or version is None:
            continue
        found.setdefault(name.lower().replace("_", "-").replace(".", "-"), (version, dist))
    return dict(sorted(found.items()))


def packages() -> dict[str, str]:
    """Installed distributions (normalised name -> version); the first on sys.path wins."""
    return {name: version for name, (version, _) in distributions().items()}


def _name_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the metadata's header (the lines before the first empty
    one): the values ``dist.metadata`` gives, without parsing the whole file as an e-mail, which
    for a few hundred distributions costs a quarter of a second."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    name = version = None
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        if key == "Name" and name is None:
            name = value.strip()
        elif key == "Version" and version is None:
            version = value.strip()
    return name, version


def torch_info(light: bool = False) -> dict[str, Any] | None:
    """The torch build; ``light``: its version from the installed metadata, no import."""
    if importlib.util.find_spec("torch") is None:
        return None
    if light and "torch" not in sys.modules:
        return {"version": importlib.metadata.version("torch"), "probe": "metadata only (not imported)"}
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


def start_mpi_probe() -> subprocess.Popen[str] | None:
    """Read the MPI library version in a child process, so this process never initialises MPI."""
    if "mpi4py.MPI" in sys.modules or importlib.util.find_spec("mpi4py") is None:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _MPI_PROBE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def mpi_info(probe: subprocess.Popen[str] | None) -> dict[str, Any] | None:
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
    return json.loads(out.strip().splitlines()[-1])


def mpi_metadata() -> dict[str, Any] | None:
    """mpi4py's version from the installed metadata (no subprocess, no MPI library read)."""
    try:
        version = importlib.metadata.version("mpi4py")
    except importlib.metadata.PackageNotFoundError:
        return None
    return {"mpi4py": version, "library": None, "standard": None, "probe": "metadata only"}


def horovod_info(light: bool = False) -> dict[str, Any] | None:
    """Horovod's build flags; ``light``: its version from the installed metadata, no import."""
    if importlib.util.find_spec("horovod") is None:
        return None
    if light:
        return {"version": importlib.metadata.version("horovod"), "probe": "metadata only (not imported)"}
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


def cpu_info() -> dict[str, Any]:
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


def gpu_info() -> dict[str, Any] | None:
    try:
        res = run_tool(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
                       _SUBPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        res = None
    if res is not None and res.returncode == 0 and res.stdout.strip():
        rows = [[p.strip() for p in line.split(",")] for line in res.stdout.strip().splitlines()]
        devices = [{"name": r[0], "driver": r[1], "memory_mib": r[2]} for r in rows if len(r) >= 3]
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


def os_info() -> dict[str, Any]:
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
    return Path(__file__).resolve().parents[3]


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
