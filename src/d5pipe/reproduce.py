"""``d5pipe reproduce BUNDLE``: re-run a published run and say, metric by metric, whether it reproduced.

Steps, in order:

1. Open the bundle (a run directory, or a ``.tar.gz`` extracted into a temporary directory with
   the checks of :func:`d5pipe.bundle.extract`).
2. Verify ``CHECKSUMS.sha256``. Any modified, missing or added file -> verdict ``tampered``
   (exit 3) naming the files; nothing is re-run.
3. Compare the bundle's environment record (``manifest.json`` key ``environment``) with this
   process's. Differences are listed as warnings. With ``strict_env`` a different ``env_hash`` is a
   refusal: :class:`D5PipeError` (exit 2) — nothing was measured, so "not reproduced" (3) would be
   wrong.
4. Re-run exactly the bundle's ``config.yaml`` (which carries the root seed; point seeds derive from
   it) through the injected ``rerun(config_yaml, out_dir)`` into ``out`` (absent or empty).
5. Compare every point and metric (:mod:`d5pipe.compare`, :mod:`d5pipe.stat_compare`), including
   the point status and seed. Points missing from the re-run fail; timing changes fail.
6. Write ``reproduce.json`` (schema_version 1) into ``out`` and return the verdict:
   exit 0 reproduced, 3 not reproduced or tampered.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from d5pipe import envinfo
from d5pipe.atomic import write_json
from d5pipe.bundle import is_archive, opened_bundle, verify
from d5pipe.compare import PointComparison, compare_loaded, load_run
from d5pipe.errors import D5PipeError
from d5pipe.stat_compare import ComparePolicy, is_reproduced

REPRODUCE_SCHEMA_VERSION = 1
RerunFn = Callable[[Path, Path], object]
"""``rerun(config_yaml, out_dir)``: run exactly that config into ``out_dir`` (return value ignored)."""
Status = Literal["reproduced", "not_reproduced", "tampered"]


@dataclass
class ReproduceVerdict:
    """Outcome of :func:`reproduce`."""

    status: Status
    out_dir: Path
    report_path: Path
    checksum_problems: list[str] = field(default_factory=list)
    env_reference_hash: str | None = None
    env_current_hash: str | None = None
    env_differences: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """One line per failed comparison: ``stage/point_id metric: detail``."""
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def reproduced(self) -> bool:
        return self.status == "reproduced"

    @property
    def exit_code(self) -> int:
        return 0 if self.reproduced else 3


def default_out(bundle: Path) -> Path:
    """``<bundle>-reproduce`` next to a bundle directory; in the working directory for an archive."""
    bundle = Path(bundle)
    if is_archive(bundle):
        stem = bundle.name.removesuffix(".tar.gz").removesuffix(".tgz")
        return Path.cwd() / f"{stem}-reproduce"
    return bundle.resolve().with_name(bundle.resolve().name + "-reproduce")


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise D5PipeError(f"{path}: not found") from exc
    except json.JSONDecodeError as exc:
        raise D5PipeError(f"{path}: invalid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise D5PipeError(f"{path}: expected a JSON object")
    return data


def _point_json(p: PointComparison) -> dict[str, Any]:
    return {"stage": p.stage, "point_id": p.point_id, "params": p.params,
            "reproduced": all(is_reproduced(c.verdict) for c in p.comparisons),
            "metrics": [c.to_dict() for c in p.comparisons]}


def _write_report(verdict: ReproduceVerdict, bundle: Path, policy: ComparePolicy,
                  points: list[PointComparison]) -> None:
    write_json(verdict.report_path, {
        "schema_version": REPRODUCE_SCHEMA_VERSION,
        "bundle": str(bundle),
        "out_dir": str(verdict.out_dir),
        "status": verdict.status,
        "reproduced": verdict.reproduced,
        "verdict": verdict.status.replace("_", " "),
        "checksum_problems": verdict.checksum_problems,
        "environment": {"reference_hash": verdict.env_reference_hash,
                        "current_hash": verdict.env_current_hash,
                        "differences": verdict.env_differences},
        "policy": {"alpha": policy.alpha, "rtol": policy.rtol, "atol": policy.atol,
                   "min_rel_change": policy.min_rel_change},
        "counts": verdict.counts,
        "failures": verdict.failures,
        "points": [_point_json(p) for p in points],
    })


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise D5PipeError(f"{out}: output directory exists and is not empty; choose another with --out")


def reproduce(bundle: Path, out: Path | None, strict_env: bool, rerun: RerunFn,
              policy: ComparePolicy | None = None) -> ReproduceVerdict:
    """Re-run ``bundle`` into ``out`` with ``rerun`` and compare; see the module docstring."""
    bundle = Path(bundle)
    policy = policy or ComparePolicy()
    out = Path(out) if out is not None else default_out(bundle)
    _check_out(out)
    with opened_bundle(bundle) as ref_dir:
        problems = verify(ref_dir)
        if problems:
            verdict = ReproduceVerdict(status="tampered", out_dir=out, report_path=out / "reproduce.json",
                                       checksum_problems=problems)
            _write_report(verdict, bundle, policy, [])
            return verdict
        manifest = _read_manifest(ref_dir)
        ref_record = envinfo.record_from_manifest(manifest, str(ref_dir / "manifest.json"))
        ref_hash = str(manifest.get("env_hash") or envinfo.env_hash(ref_record))
        current = envinfo.environment_record()
        cur_hash = envinfo.env_hash(current)
        differences = envinfo.diff_records(ref_record, current)
        if strict_env and ref_hash != cur_hash:
            first = differences[0] if differences else "no field differs (hash subset changed)"
            raise D5PipeError(
                f"environment differs from the bundle (env_hash {ref_hash} != {cur_hash}; {first}; "
                f"{len(differences)} differences) and --strict-env is set")
        config = ref_dir / "config.yaml"
        if not config.is_file():
            raise D5PipeError(f"{config}: bundle has no config.yaml")
        reference = load_run(ref_dir)
        rerun(config, out)
        if not (out / "results.parquet").is_file():
            raise D5PipeError(f"{out}: the re-run wrote no results.parquet")
        result = compare_loaded(reference, load_run(out), policy, check_seeds=True)
    failures: list[str] = []
    counts: Counter[str] = Counter()
    for p in result.points:
        for c in p.comparisons:
            counts[c.verdict] += 1
            if not is_reproduced(c.verdict):
                failures.append(f"{p.stage}/{p.point_id} {c.metric}: {c.verdict}: {c.detail}")
    failures += [f"{s}/{pid}: point missing in the re-run" for s, pid in result.only_ref]
    failures += [f"{s}/{pid}: point not in the bundle" for s, pid in result.only_new]
    counts["points_missing"] = len(result.only_ref)
    counts["points_extra"] = len(result.only_new)
    verdict = ReproduceVerdict(
        status="not_reproduced" if failures else "reproduced", out_dir=out, report_path=out / "reproduce.json",
        env_reference_hash=ref_hash, env_current_hash=cur_hash, env_differences=differences,
        failures=failures, counts=dict(counts),
    )
    _write_report(verdict, bundle, policy, result.points)
    return verdict
