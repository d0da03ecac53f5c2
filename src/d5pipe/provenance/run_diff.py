"""What two runs differ in, before any number of theirs is compared: config, environment, code, machine.

``d5pipe compare A B`` and ``d5pipe ab`` open with it, so a change in the table can be read
against what changed underneath it. Four parts, each read from the run directory:

* **config**: every key of the resolved ``config.yaml`` that differs (flattened to dotted keys),
  and the command-line overrides of ``overrides.yaml`` when those differ;
* **environment**: the ``env_hash`` of the results and, from the manifest's ``environment`` records,
  the differences that change the hash (packages, torch build, thread variables, git) -- the lines
  of ``d5pipe env --diff`` (:func:`d5pipe.provenance.environment.differences`), which lists the rest;
* **code**: the source hash of each user module (``RUN/code/index.json``) that differs, and which files;
* **machine**: CPU (model, cores, flags), GPUs and hostname.

Two runs with the same config, environment hash and code give one line: "same config,
environment and code" (a different machine is still named after it). A part a run does not
record (a bundle from before it, a dry run without results) is said so, never taken as equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from d5pipe.config.code_dir import read_index
from d5pipe.core.errors import D5PipeError
from d5pipe.core.yamlio import safe_load
from d5pipe.provenance.environment import differences, env_hash, is_hash_relevant
from d5pipe.rundir.layout import RunDir

MACHINE_KEYS: tuple[str, ...] = ("cpu", "gpu", "hostname")
"""Record parts (dotted prefixes) that describe the machine rather than the software."""

SAME_LINE = "same config, environment and code"


@dataclass(frozen=True)
class RunDifferences:
    """What differs between runs A and B, one line per difference, by part."""

    config: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    machine: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    """Parts a run does not record ("environment: not recorded in B")."""

    def same(self) -> bool:
        """Config, environment and code known on both sides and equal (the machine may differ)."""
        return not (self.config or self.environment or self.code or self.unknown)

    def lines(self, limit: int = 10) -> list[str]:
        """The differences as printed: ``SAME_LINE``, or a heading and ``part  line`` rows (at most
        ``limit`` per part; the rest counted); the machine's rows either way."""
        out = [SAME_LINE] if self.same() else ["what differs between A and B:"]
        parts = [("config", self.config), ("environment", self.environment), ("code", self.code),
                 ("machine", self.machine), ("unknown", self.unknown)]
        for name, rows in parts:
            out += [f"  {name:<11} {row}" for row in rows[:limit]]
            if len(rows) > limit:
                more = f"{len(rows) - limit} more"
                out.append(f"  {name:<11} ... {more}" + (" (d5pipe env --diff A B)" if name == "environment" else ""))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"same": self.same(), "config": list(self.config), "environment": list(self.environment),
                "code": list(self.code), "machine": list(self.machine), "unknown": list(self.unknown)}


def _config(rd: RunDir) -> dict[str, Any] | None:
    if not rd.config_path.is_file():
        return None
    try:
        return rd.config
    except D5PipeError:
        return None


def _overrides(rd: RunDir) -> list[str] | None:
    try:
        data = safe_load(rd.overrides_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    found = data.get("overrides") if isinstance(data, dict) else None
    return [str(x) for x in found] if isinstance(found, list) else None


def _config_lines(a: RunDir, b: RunDir) -> tuple[list[str], list[str]]:
    ca, cb = _config(a), _config(b)
    if ca is None or cb is None:
        return [], [f"config: no config.yaml in {_sides(ca is None, cb is None)}"]
    lines = [line for _key, line in differences(ca, cb)]
    oa, ob = _overrides(a), _overrides(b)
    if oa is not None and ob is not None and oa != ob:
        lines.append(f"overrides: {' '.join(oa) or '(none)'} -> {' '.join(ob) or '(none)'}")
    return lines, []


def _record(manifest: dict[str, Any]) -> dict[str, Any] | None:
    env = manifest.get("environment")
    return env if isinstance(env, dict) else None


def _hashes(manifest: dict[str, Any], record: dict[str, Any]) -> str:
    several = manifest.get("env_hashes")
    if isinstance(several, list) and several:
        return ",".join(str(h) for h in several)
    return str(manifest.get("env_hash") or env_hash(record))


def _is_machine(key: str) -> bool:
    return any(key == part or key.startswith(part + ".") for part in MACHINE_KEYS)


def _environment_lines(a: RunDir, b: RunDir) -> tuple[list[str], list[str], list[str]]:
    """(environment, machine, unknown) lines from the manifests' environment records."""
    ma, mb = a.manifest, b.manifest
    ra, rb = _record(ma), _record(mb)
    if ra is None or rb is None:
        return [], [], [f"environment: not recorded in {_sides(ra is None, rb is None)}"]
    found = differences(ra, rb)
    machine = [line for key, line in found if _is_machine(key)]
    software = [line for key, line in found
                if not _is_machine(key) and not key.startswith("lock.") and is_hash_relevant(key)]
    ha, hb = _hashes(ma, ra), _hashes(mb, rb)
    if ha != hb:
        software.insert(0, f"env_hash {ha} -> {hb}")
    return software, machine, []


def _code_lines(a: RunDir, b: RunDir) -> list[str]:
    ma = read_index(a.root).get("modules") or {}
    mb = read_index(b.root).get("modules") or {}
    lines = []
    for name in sorted(set(ma) | set(mb)):
        ea, eb = ma.get(name), mb.get(name)
        if not isinstance(ea, dict) or not isinstance(eb, dict):
            lines.append(f"{name}: only in {'B' if ea is None else 'A'}")
            continue
        if ea.get("sha256") == eb.get("sha256"):
            continue
        fa, fb = ea.get("files") or {}, eb.get("files") or {}
        changed = sorted(f for f in set(fa) | set(fb) if fa.get(f) != fb.get(f))
        dists = sorted(set(ea.get("distributions") or []) ^ set(eb.get("distributions") or []))
        what = ", ".join(changed + dists)
        lines.append(f"{name}: {str(ea.get('sha256'))[:12]} -> {str(eb.get('sha256'))[:12]}"
                     + (f" ({what})" if what else ""))
    return lines


def _sides(a: bool, b: bool) -> str:
    return "A and B" if a and b else ("A" if a else "B")


def run_differences(run_a: Path, run_b: Path) -> RunDifferences:
    """What differs between the run directories ``run_a`` and ``run_b`` (see the module docstring)."""
    a, b = RunDir.of(run_a), RunDir.of(run_b)
    config, unknown_config = _config_lines(a, b)
    environment, machine, unknown_env = _environment_lines(a, b)
    return RunDifferences(config=tuple(config), environment=tuple(environment), code=tuple(_code_lines(a, b)),
                          machine=tuple(machine), unknown=tuple(unknown_config + unknown_env))
