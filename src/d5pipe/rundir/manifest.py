"""``manifest.json``: the provenance of a run (first version; bundles extend it)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from d5pipe.core.version import __version__
from d5pipe.plan.build import Plan
from d5pipe.rundir.layout import RunDir

MANIFEST_SCHEMA_VERSION = 1


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """A copy of ``RUN/manifest.json`` to change ({} when there is none yet)."""
    return copy.deepcopy(RunDir.of(run_dir).manifest)


def build_manifest(plan: Plan, environment: dict[str, Any], env_hash: str) -> dict[str, Any]:
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "d5pipe_version": __version__,
        "experiment": plan.experiment,
        "config_hash": plan.config_hash,
        "config": plan.config,
        "seed": plan.root_seed,
        "seed_policy": "point seed = derive_seed(root, '<stage>/<point_id>'); "
        "rank seed = derive_seed(point seed, 'rank<r>'); derive_seed = sha256('<parent>:<label>')[:8] & (2**63-1)",
        "seeds": {
            s: dict(zip(sp.point_ids, sp.seeds)) for s, sp in plan.stages.items()
        },
        "datasets": {k: {"config": v} for k, v in plan.datasets.items()},
        "submit_environment": environment,
        "submit_env_hash": env_hash,
        # Replaced by finalize_manifest() with the environment the points actually ran in
        # (Snakemake jobs set e.g. OMP/MKL thread variables, so it can differ from the submitter).
        "environment": environment,
        "env_hash": env_hash,
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write atomically, keeping ``created``, the measured environments and dataset checksums
    from an earlier write."""
    rd = RunDir.of(run_dir)
    old = rd.manifest
    manifest = dict(manifest)
    manifest["created"] = old.get("created") or datetime.now(UTC).isoformat(timespec="seconds")
    if "env_hashes" in old:  # finalised by an earlier report: keep the points' environment
        for key in ("environment", "env_hash", "env_hashes"):
            manifest[key] = old[key]
    for key, info in manifest.get("datasets", {}).items():
        prev = old.get("datasets", {}).get(key, {})
        if "checksum" in prev and prev.get("config") == info.get("config"):
            info.update({k: v for k, v in prev.items() if k != "config"})
    rd.write_json(rd.manifest_path, manifest, indent=1)


def finalize_manifest(run_dir: Path, used_hashes: list[str]) -> None:
    """The report job's additions, in one read and one write (so prepare jobs never race on it):
    each prepared dataset's metadata (checksum, sizes) from ``data/<key>.json``, and the
    environment(s) the results were measured in (``RUN/env/<hash>.json``): ``env_hash`` the hash
    on most result rows, ``env_hashes`` all of them (several when shards ran on different nodes
    or software), ``environment`` the full record of ``env_hash``.
    """
    rd = RunDir.of(run_dir)
    manifest = read_manifest(run_dir)
    if not manifest:
        return
    for key, entry in manifest.get("datasets", {}).items():
        meta_path = rd.dataset_meta(key)
        if meta_path.exists():
            entry.update({k: v for k, v in json.loads(meta_path.read_text(encoding="utf-8")).items() if k != "config"})
    if used_hashes:
        main = used_hashes[0]
        env_path = rd.env_record(main)
        if env_path.exists():
            manifest["environment"] = json.loads(env_path.read_text(encoding="utf-8"))
        manifest["env_hash"] = main
        manifest["env_hashes"] = sorted(set(used_hashes))
    rd.write_json(rd.manifest_path, manifest, indent=1)
