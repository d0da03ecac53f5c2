"""Compiled user operators: C++ sources built by the pipeline with ``torch.utils.cpp_extension``,
then checked and timed like any operator.

A ``operators.custom`` entry names the factory :func:`cpp_operator` with the sources::

    cpp_naive:
      _target_: d5pipe.levels.level0.compiled.cpp_operator
      package: cpp_matmul          # a Python package the runner allowed (--allow cpp_matmul)
      sources: [matmul.cpp]        # relative to the package's directory
      forward: naive_matmul        # the extension's function: tensors in, the result out
      backward: naive_matmul_backward   # optional: (grad_out, *inputs) -> one gradient per input
      flags: [-O3]
      include_dirs: [include]      # relative to the package's directory
      compare_to: matmul           # inputs, float64 reference and FLOPs of this built-in

* **Trust**: the sources are user code, so ``package`` must lie under the runner's allow-list
  (d5pipe.core.allowlist); the files are found without importing anything.
* **Identity**: the package's native sources are part of its code hash (d5pipe.core.code_hash), so
  editing a source re-plans the points that use it and the sources travel in ``RUN/code/``.
* **Build**: one build per :class:`BuildSpec` key -- the sources' and headers' contents, the flags,
  the compiler and its version, torch's and Python's versions -- into the user cache
  (``<cache>/compiled/<key>/``), under a file lock. The run's DAG builds each key once, before the
  level-0 shards (``build_operator``, d5pipe.execute.snakefile_api); a later run with the same key
  reuses the binary. A point finds the build's record there (:func:`build`, which builds only where no
  job did, e.g. ``d5pipe profile``).
* **Failure**: a compile error is recorded once (the compiler's first error lines); the points that
  need that operator fail with it and every other point runs. A missing compiler is a one-line
  error at ``d5pipe plan`` (:func:`check_entry`).
* **Provenance**: every point that uses the operator records the build's record (sources' and
  headers' sha256, compiler and version, flags, the binary's sha256, built or reused): the record's
  ``extra.compiled``.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from d5pipe.core.allowlist import allow_list, module_allowed, outside_error
from d5pipe.core.atomic import read_json, write_json
from d5pipe.core.canonical import digest
from d5pipe.core.code_hash import NATIVE_SUFFIXES, file_digest, locate_module
from d5pipe.core.errors import D5PipeError
from d5pipe.core.toolchain import compiler
from d5pipe.core.user_dirs import user_cache_dir

FACTORY = f"{__name__}.cpp_operator"
"""The ``_target_`` of a compiled operator's entry."""
BUILD_VERSION = 1
"""Changes when this module builds differently (part of every key)."""
BUILD_TIMEOUT_S = 1800.0
ERROR_LINES = 6
"""The compiler's first error lines a failed build keeps."""
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu")
CUDA_SUFFIX = ".cu"
"""A CUDA source: torch.utils.cpp_extension compiles it with nvcc (found through ``$CUDA_HOME`` or PATH)."""


def cache_root() -> Path:
    return user_cache_dir() / "compiled"


@dataclass(frozen=True)
class BuildSpec:
    """What one build compiles: files relative to the package's directory, and how."""

    package: str
    root: str
    """The package's directory (absolute)."""
    sources: tuple[str, ...]
    include_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    def files(self) -> dict[str, str]:
        """sha256 of every source and of every native file under the include directories."""
        root = Path(self.root)
        out = {s: file_digest(root / s) for s in self.sources}
        for inc in self.include_dirs:
            for path in sorted((root / inc).rglob("*")):
                if path.is_file() and path.suffix in NATIVE_SUFFIXES:
                    out[path.relative_to(root).as_posix()] = file_digest(path)
        return out

    def key(self) -> str:
        """24 hex digits naming the binary: contents, flags, compiler, torch and Python (module
        docstring); torch-free (``d5pipe plan`` computes it)."""
        from importlib import metadata

        ident = {"files": self.files(), "flags": list(self.flags), "include_dirs": list(self.include_dirs),
                 "compiler": compiler(), "torch": metadata.version("torch"), "python": sys.version.split()[0],
                 "machine": platform.machine(), "version": BUILD_VERSION}
        return digest(ident, 24)


def _relative(value: Any, where: str, root: Path, is_dir: bool) -> str:
    text = str(value)
    rel = PurePosixPath(text)
    if rel.is_absolute() or ".." in rel.parts or not text.strip():
        raise D5PipeError(f"config error: key '{where}': {text!r} must be a path inside the package's directory")
    path = root / rel
    if not (path.is_dir() if is_dir else path.is_file()):
        raise D5PipeError(f"config error: key '{where}': {path} is not {'a directory' if is_dir else 'a file'}")
    if not is_dir and path.suffix not in SOURCE_SUFFIXES:
        raise D5PipeError(f"config error: key '{where}': {text!r} is not a C, C++ or CUDA source ({', '.join(SOURCE_SUFFIXES)})")
    return rel.as_posix()


def build_spec(entry: Mapping[str, Any], where: str) -> BuildSpec:
    """The build an entry asks for, every value checked (one line naming the key); nothing imported."""
    package = entry.get("package")
    if not isinstance(package, str) or not package:
        raise D5PipeError(f"config error: key '{where}.package': the Python package holding the sources")
    allowed = allow_list()
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", package) or not module_allowed(package, allowed):
        raise outside_error(f"{where}.package", package, allowed)
    chain = locate_module(package)
    locations = list(chain[-1].spec.submodule_search_locations or []) if chain and chain[-1].name == package else []
    if not locations:
        raise D5PipeError(f"config error: key '{where}.package': {package!r} is not a package on the import path "
                          "(PYTHONPATH) of this process")
    root = Path(locations[0]).resolve()
    sources = entry.get("sources")
    if not isinstance(sources, Sequence) or isinstance(sources, str) or not sources:
        raise D5PipeError(f"config error: key '{where}.sources': a list of C++ files")
    for name in ("flags", "include_dirs"):
        value = entry.get(name, [])
        if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise D5PipeError(f"config error: key '{where}.{name}': a list of strings")
    return BuildSpec(package, str(root),
                     tuple(_relative(s, f"{where}.sources[{i}]", root, False) for i, s in enumerate(sources)),
                     tuple(_relative(d, f"{where}.include_dirs", root, True) for d in entry.get("include_dirs", [])),
                     tuple(str(f) for f in entry.get("flags", [])))


def check_entry(entry: Mapping[str, Any], where: str) -> BuildSpec:
    """``d5pipe plan``'s check of a compiled operator: its build, its entry points named, a compiler here."""
    spec = build_spec(entry, where)
    for name in ("forward", "backward"):
        value = entry.get(name, "")
        if (name == "forward" or value) and not (isinstance(value, str) and value.isidentifier()):
            raise D5PipeError(f"config error: key '{where}.{name}': the extension's function name")
    try:
        compiler()
    except D5PipeError as exc:
        raise D5PipeError(f"config error: key '{where}': {exc}") from None
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or ""
    if any(s.endswith(CUDA_SUFFIX) for s in spec.sources) and not (
            shutil.which("nvcc") or (cuda_home and Path(cuda_home, "bin", "nvcc").is_file())):
        raise D5PipeError(f"config error: key '{where}.sources': a CUDA source needs nvcc, which is neither on PATH "
                          "nor under $CUDA_HOME here")
    return spec


def _first_errors(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if re.search(r"\berror\b", ln, re.IGNORECASE)]
    return "\n".join(lines[:ERROR_LINES]) or "\n".join(text.strip().splitlines()[:ERROR_LINES])


def _compile(spec: BuildSpec, key: str, where: Path) -> dict[str, Any]:
    """torch.utils.cpp_extension's build of ``spec`` in ``where``: the record's outcome fields."""
    from torch.utils.cpp_extension import load

    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # ninja
    root = Path(spec.root)
    started = time.perf_counter()
    try:
        module = load(name=f"d5pipe_op_{key}", sources=[str(root / s) for s in spec.sources],
                      extra_cflags=list(spec.flags), extra_include_paths=[str(root / d) for d in spec.include_dirs],
                      build_directory=str(where), verbose=False, is_python_module=True)
    except Exception as exc:  # noqa: BLE001 - a compile error is this build's outcome, kept for its points
        return {"status": "failed", "error": _first_errors(str(exc)), "seconds": time.perf_counter() - started}
    binary = Path(str(module.__file__))
    return {"status": "ok", "binary": binary.name, "binary_sha256": file_digest(binary),
            "seconds": time.perf_counter() - started}


def build(spec: BuildSpec, retry_failed: bool = False) -> dict[str, Any]:
    """The build's record from the cache, compiling first where there is none yet (or a failed one,
    with ``retry_failed``); ``outcome`` says ``built`` or ``reused``."""
    from filelock import FileLock

    key = spec.key()
    where = cache_root() / key
    where.mkdir(parents=True, exist_ok=True)
    record_path = where / "build.json"
    with FileLock(str(where / ".lock"), timeout=BUILD_TIMEOUT_S):
        record = _read(record_path)
        usable = record is not None and (record["status"] == "ok" and (where / record["binary"]).is_file()
                                         and file_digest(where / record["binary"]) == record["binary_sha256"]
                                         or record["status"] == "failed" and not retry_failed)
        if record is not None and usable:
            return {**record, "outcome": "reused"}
        cxx, version = compiler()
        record = {"schema_version": 1, "key": key, "package": spec.package, "sources": spec.files(),
                  "flags": list(spec.flags), "include_dirs": list(spec.include_dirs),
                  "compiler": {"path": cxx, "version": version}, **_versions(), **_compile(spec, key, where)}
        write_json(record_path, record)
    return {**record, "outcome": "built"}


def _versions() -> dict[str, str]:
    import torch

    return {"torch": torch.__version__, "python": sys.version.split()[0]}


def _read(path: Path) -> dict[str, Any] | None:
    data = read_json(path)
    return data if isinstance(data, dict) and data.get("schema_version") == 1 else None


def load_binary(record: Mapping[str, Any]) -> Any:
    """The built extension module (imported from the cache, no compiler involved)."""
    import importlib.util

    name = f"d5pipe_op_{record['key']}"
    if name in sys.modules:  # this process built it (torch's load imports what it builds)
        return sys.modules[name]
    path = cache_root() / str(record["key"]) / str(record["binary"])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise D5PipeError(f"compiled operator: {path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpp_operator(package: str, sources: Sequence[str], forward: str, backward: str = "",
                 flags: Sequence[str] = (), include_dirs: Sequence[str] = (), compare_to: str = "",
                 description: str = "") -> Any:
    """The :class:`~d5pipe.levels.level0.spec.OperatorSpec` of a compiled operator (module docstring)."""
    import torch

    from d5pipe.levels.level0.spec import OperatorSpec

    entry = {"package": package, "sources": list(sources), "forward": forward, "backward": backward,
             "flags": list(flags), "include_dirs": list(include_dirs)}
    record = build(check_entry(entry, f"compiled operator {forward}"))
    if record["status"] != "ok":
        raise D5PipeError(f"compiled operator {forward}: the build of {package} ({', '.join(sources)}) failed: "
                          + " | ".join(str(record["error"]).splitlines()))
    ext = load_binary(record)
    fwd: Any = getattr(ext, forward, None)
    bwd: Any = getattr(ext, backward, None) if backward else None
    if fwd is None or (backward and bwd is None):
        missing = forward if fwd is None else backward
        raise D5PipeError(f"compiled operator: {package}'s extension has no function {missing!r}")
    op: Any = fwd
    if bwd is not None:
        class _WithBackward(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *inputs: torch.Tensor) -> Any:
                ctx.save_for_backward(*inputs)
                return fwd(*inputs)

            @staticmethod
            def backward(ctx: Any, grad: torch.Tensor) -> Any:
                return tuple(bwd(grad.contiguous(), *ctx.saved_tensors))

        op = _WithBackward.apply
    provenance = {k: v for k, v in record.items() if k != "schema_version"}
    return OperatorSpec(name=forward, make_inputs=None, forward=op, reference=None, flops=None, min_bytes=None,
                        compare_to=compare_to, description=description or f"{package}: {forward} (compiled C++)",
                        provenance=provenance)


def selected(operators: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """``(key, entry)`` of the point's operator when it is a compiled one."""
    op = str(operators.get("op") or "")
    entry = entries(operators).get(op)
    return None if entry is None else (f"operators.custom.{op}", entry)


def check_allowed(operators: Mapping[str, Any]) -> None:
    """Every compiled operator's package against the runner's allow-list; nothing searched or read."""
    allowed = allow_list()
    for name, entry in entries(operators).items():
        package = entry.get("package")
        if not isinstance(package, str) or not module_allowed(package, allowed):
            raise outside_error(f"operators.custom.{name}.package", str(package), allowed)


def entries(operators: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The compiled operators among ``operators.custom``: name -> entry."""
    custom = operators.get("custom") or {}
    return {name: value for name, value in custom.items()
            if isinstance(value, Mapping) and value.get("_target_") == FACTORY}


def spec_of(data: Mapping[str, Any]) -> BuildSpec:
    """``dataclasses.asdict``'s inverse for a :class:`BuildSpec` (``plan/index.json``'s ``builds``)."""
    return BuildSpec(str(data["package"]), str(data["root"]), tuple(data["sources"]), tuple(data["include_dirs"]),
                     tuple(data["flags"]))
