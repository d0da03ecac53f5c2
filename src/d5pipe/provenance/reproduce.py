"""``d5pipe reproduce BUNDLE``: re-run a published run and say, metric by metric, whether it reproduced.

Steps, in order:

1. Open the bundle (a run directory, or a ``.tar.gz`` extracted into a temporary directory with
   the checks of :func:`d5pipe.provenance.bundle.extract`).
2. Verify ``CHECKSUMS.sha256``. Any modified, missing or added file -> verdict ``tampered``
   (exit 3) naming the files; nothing is re-run. Then every plug-in target of the bundle's
   ``config.yaml`` is checked against the *reproducer's* allow-list (``--allow``,
   ``D5PIPE_ALLOW``, ``~/.config/d5pipe/allow.yaml``; a bundle cannot widen it): one outside it is
   a :class:`D5PipeError` (exit 2) naming it, before anything is imported. Only then does the
   bundle's ``code/`` (the user modules the run used, d5pipe.config.code_dir) go first on the
   import path of this process and, through ``PYTHONPATH``, of the re-run's jobs.
3. Compare the *submitting* environments: the bundle's ``submit_environment`` (the process that ran
   ``d5pipe run``; ``environment`` for bundles without one) with this process's record. With
   ``strict_env`` a different hash is a refusal: :class:`D5PipeError` (exit 2) — nothing was
   measured, so "not reproduced" (3) would be wrong.
4. Re-run exactly the bundle's ``config.yaml`` (which carries the root seed; point seeds derive from
   it) through the injected ``rerun(config_yaml, out_dir)`` into ``out`` (absent or empty).
5. Compare the *measurement* environments like with like: the bundle's ``environment`` (the record
   of the shard processes that produced the result rows) with the re-run's. The two levels differ
   on purpose: Snakemake sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/... of every job to the rule's
   threads, so a thread variable of the submitting shell need not reach the measurements. With
   ``strict_env`` a different measurement hash is a failure (the re-run did happen: exit 3).
6. Compare every configuration (:mod:`d5pipe.results.compare`), including the point status and
   seed, and write ``reproduce.json`` (schema_version 2) into ``out``.

Verdict policy (exit 0 reproduced, 3 not reproduced or tampered):

* **Fail**: a point missing from either run; a different status or seed; any ``deterministic``,
  ``count`` or ``verdict`` metric not identical; a ``numerical`` metric outside ``rtol``/``atol``;
  a metric missing in the re-run.
* **Timings** (and what is derived from them, such as level 3's speedup and efficiency) are
  compared across the repetitions of both runs by the one comparison model
  (:mod:`d5pipe.results.timing_compare`): each is ``changed``, ``equivalent`` (within the margin)
  or ``inconclusive``, and only ``equivalent`` is called reproduced. By default neither a change
  nor an undecided timing makes the run "not reproduced" -- a re-run on another machine or at
  another time computes the same thing at another speed -- but both are counted and listed.
  ``strict_timing`` (``--strict-timing``) fails on a changed timing, ``fail_on_inconclusive``
  (``--fail-on-inconclusive``) on an undecided one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from d5pipe.core.atomic import write_json
from d5pipe.core.errors import D5PipeError
from d5pipe.provenance import environment as envinfo
from d5pipe.provenance.bundle import is_archive, opened_bundle, verify
from d5pipe.results.compare import PointComparison, compare_loaded, load_points
from d5pipe.results.metric_compare import ComparePolicy
from d5pipe.results.profile_changes import explain_comparison
from d5pipe.results.timing_compare import Policy
from d5pipe.rundir.layout import RunDir

REPRODUCE_SCHEMA_VERSION = 2
RerunFn = Callable[[Path, Path], object]
"""``rerun(config_yaml, out_dir)``: run exactly that config into ``out_dir`` (return value ignored)."""
Status = Literal["reproduced", "not_reproduced", "tampered"]


@dataclass
class EnvComparison:
    """One level of environment comparison: the bundle's record against this machine's."""

    reference_hash: str | None = None
    current_hash: str | None = None
    differences: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.reference_hash == self.current_hash

    def to_dict(self) -> dict[str, Any]:
        return {"reference_hash": self.reference_hash, "current_hash": self.current_hash,
                "same": self.same, "differences": self.differences}


@dataclass
class ReproduceVerdict:
    """Outcome of :func:`reproduce`."""

    status: Status
    out_dir: Path
    report_path: Path
    checksum_problems: list[str] = field(default_factory=list)
    env_reference_hash: str | None = None
    """env_hash of the bundle's measurements (manifest ``env_hash``)."""
    env_current_hash: str | None = None
    """env_hash of the re-run's measurements (its manifest ``env_hash``)."""
    env_differences: list[str] = field(default_factory=list)
    """Measurement-environment differences (bundle ``environment`` vs the re-run's)."""
    submit_env: EnvComparison = field(default_factory=EnvComparison)
    """Submitting-process differences (bundle ``submit_environment`` vs this process)."""
    failures: list[str] = field(default_factory=list)
    """One line per failed comparison: ``stage/point_id metric: verdict: detail``."""
    timing_changes: list[str] = field(default_factory=list)
    """One line per changed timing (failures too only with ``strict_timing``)."""
    timing_undecided: list[str] = field(default_factory=list)
    """One line per inconclusive timing, with the repetitions that would decide it."""
    strict_timing: bool = False
    fail_on_inconclusive: bool = False
    timing_counts: dict[str, int] = field(default_factory=dict)
    """Timings by verdict: changed, inconclusive, equivalent, not_compared."""
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
    rd = RunDir.of(run_dir)
    if not rd.manifest_path.is_file():
        raise D5PipeError(f"{rd.manifest_path}: not found")
    return rd.manifest


def _timing_fails(verdict: str, strict_timing: bool, fail_on_inconclusive: bool) -> bool:
    return (verdict == "changed" and strict_timing) or (verdict == "inconclusive" and fail_on_inconclusive)


def _point_json(p: PointComparison, strict_timing: bool, fail_on_inconclusive: bool) -> dict[str, Any]:
    fails = any(c.verdict == "not_reproduced" for c in p.comparisons) or any(
        _timing_fails(t.verdict, strict_timing, fail_on_inconclusive) for t in p.timings if not t.derived_from)
    return {"stage": p.stage, "point_id": p.point_id, "params": p.params, "reproduced": not fails,
            "timings": [t.to_dict() for t in p.timings],
            "metrics": [c.to_dict() for c in p.comparisons]}


def _timing_summary(verdict: ReproduceVerdict, timing: Policy) -> dict[str, Any]:
    return {"policy": {"changed": "fail" if verdict.strict_timing else "report",
                       "inconclusive": "fail" if verdict.fail_on_inconclusive else "report",
                       "alpha": timing.alpha, "margin": timing.margin, "correction": timing.correction},
            **verdict.timing_counts, "changes": verdict.timing_changes, "undecided": verdict.timing_undecided}


def _write_report(verdict: ReproduceVerdict, bundle: Path, policy: ComparePolicy, timing: Policy,
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
                        "differences": verdict.env_differences,
                        "submit": verdict.submit_env.to_dict()},
        "policy": {"rtol": policy.rtol, "atol": policy.atol, "strict_timing": verdict.strict_timing,
                   "fail_on_inconclusive": verdict.fail_on_inconclusive},
        "counts": verdict.counts,
        "timing": _timing_summary(verdict, timing),
        "failures": verdict.failures,
        "points": [_point_json(p, verdict.strict_timing, verdict.fail_on_inconclusive) for p in points],
    })


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise D5PipeError(f"{out}: output directory exists and is not empty; choose another with --out")


def _submit_comparison(manifest: dict[str, Any], source: str) -> EnvComparison:
    """Bundle's submitting environment (``environment`` for older bundles) vs this process."""
    key = "submit_environment" if isinstance(manifest.get("submit_environment"), dict) else "environment"
    ref = envinfo.record_from_manifest(manifest, source, key)
    current = envinfo.environment_record(light=True)  # as d5pipe run records its submitter
    return EnvComparison(envinfo.env_hash(ref), envinfo.env_hash(current), envinfo.diff_records(ref, current))


def _measured_comparison(ref: dict[str, Any], new: dict[str, Any], ref_dir: Path, out: Path) -> EnvComparison:
    """The environments the result rows were measured in: bundle vs re-run."""
    a = envinfo.record_from_manifest(ref, str(RunDir.of(ref_dir).manifest_path))
    b = envinfo.record_from_manifest(new, str(RunDir.of(out).manifest_path))
    ha = str(ref.get("env_hash") or envinfo.env_hash(a))
    hb = str(new.get("env_hash") or envinfo.env_hash(b))
    return EnvComparison(ha, hb, envinfo.diff_records(a, b))


def _judge(points: list[PointComparison], only_ref: list[tuple[str, str]], only_new: list[tuple[str, str]],
           strict_timing: bool, fail_on_inconclusive: bool = False
           ) -> tuple[list[str], list[str], list[str], Counter[str], Counter[str]]:
    """(failures, changed timing lines, inconclusive timing lines, metric verdict counts, timing
    verdict counts) of a run comparison under the policy."""
    failures: list[str] = []
    timing: list[str] = []
    undecided: list[str] = []
    counts: Counter[str] = Counter()
    tcounts: Counter[str] = Counter({"changed": 0, "inconclusive": 0, "equivalent": 0, "not_compared": 0})
    for p in points:
        for c in p.comparisons:
            counts[c.verdict] += 1
            if c.verdict == "not_reproduced":
                failures.append(f"{p.stage}/{p.point_id} {c.metric}: {c.label()}: {c.detail}")
        for t in p.timings:
            if t.derived_from:
                continue
            tcounts[t.verdict] += 1
            line = f"{p.stage}/{p.point_id} {t.metric}: {t.label()}: {t.text()}"
            if p.why and t.verdict == "changed":
                line += f"; where the time went (profiles): {p.why}"
            if t.verdict == "changed":
                timing.append(line)
            elif t.verdict == "inconclusive":
                undecided.append(line)
            if _timing_fails(t.verdict, strict_timing, fail_on_inconclusive):
                failures.append(line)
    failures += [f"{s}/{pid}: point missing in the re-run" for s, pid in only_ref]
    failures += [f"{s}/{pid}: point not in the bundle" for s, pid in only_new]
    counts["points_missing"] = len(only_ref)
    counts["points_extra"] = len(only_new)
    return failures, timing, undecided, counts, tcounts


def _allow_and_import_code(ref_dir: Path) -> Callable[[], None]:
    """Check the bundle's targets against the reproducer's allow-list, then put its ``code/``
    first on the import path; returns the function that undoes the path change."""
    import os
    import sys

    import yaml

    from d5pipe.config.code_dir import code_dir
    from d5pipe.levels.registry import check_config_targets

    config_path = RunDir.of(ref_dir).config_path
    if not config_path.is_file():
        return lambda: None  # reported below ("bundle has no config.yaml")
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise D5PipeError(f"{config_path}: cannot read the bundle's config ({exc})") from None
    if isinstance(config, dict):
        try:
            check_config_targets(config)
        except D5PipeError as exc:
            raise D5PipeError(f"bundle {ref_dir}: {exc}") from None
    code = code_dir(ref_dir)
    if not code.is_dir():
        return lambda: None
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(code.resolve()))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(code.resolve()), *([old_env] if old_env else [])])

    def restore() -> None:
        sys.path[:] = old_path
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env

    return restore


def reproduce(bundle: Path, out: Path | None, strict_env: bool, rerun: RerunFn,
              policy: ComparePolicy | None = None, strict_timing: bool = False,
              timing: Policy | None = None, fail_on_inconclusive: bool = False) -> ReproduceVerdict:
    """Re-run ``bundle`` into ``out`` with ``rerun`` and compare; see the module docstring."""
    bundle = Path(bundle)
    policy = policy or ComparePolicy()
    timing = timing or Policy()
    out = Path(out) if out is not None else default_out(bundle)
    _check_out(out)
    with opened_bundle(bundle) as ref_dir:
        problems = verify(ref_dir)
        if problems:
            verdict = ReproduceVerdict(status="tampered", out_dir=out, report_path=RunDir.of(out).reproduce_path,
                                       checksum_problems=problems, strict_timing=strict_timing,
                                       fail_on_inconclusive=fail_on_inconclusive)
            _write_report(verdict, bundle, policy, timing, [])
            return verdict
        restore = _allow_and_import_code(ref_dir)  # before anything of the bundle is imported
        try:
            manifest = _read_manifest(ref_dir)
            submit = _submit_comparison(manifest, str(RunDir.of(ref_dir).manifest_path))
            if strict_env and not submit.same:
                first = submit.differences[0] if submit.differences else "no field differs (hash subset changed)"
                raise D5PipeError(
                    f"environment differs from the bundle (env_hash {submit.reference_hash} != {submit.current_hash}; "
                    f"{first}; {len(submit.differences)} differences) and --strict-env is set")
            config = RunDir.of(ref_dir).config_path
            if not config.is_file():
                raise D5PipeError(f"{config}: bundle has no config.yaml")
            reference = load_points(ref_dir)
            rerun(config, out)
            if not RunDir.of(out).results_path.is_file():
                raise D5PipeError(f"{out}: the re-run wrote no results.parquet")
            measured = _measured_comparison(manifest, _read_manifest(out), ref_dir, out)
            result = compare_loaded(reference, load_points(out), policy, check_seeds=True, timing=timing)
            explain_comparison(result, ref_dir, out)  # where the time went, when both were profiled
        finally:
            restore()
    failures, changed, undecided, counts, tcounts = _judge(result.points, result.only_ref, result.only_new,
                                                           strict_timing, fail_on_inconclusive)
    if strict_env and not measured.same:
        failures.append(f"environment: the re-run was measured in env_hash {measured.current_hash}, the bundle in "
                        f"{measured.reference_hash} ({measured.differences[0] if measured.differences else '-'}) "
                        "and --strict-env is set")
    verdict = ReproduceVerdict(
        status="not_reproduced" if failures else "reproduced", out_dir=out, report_path=RunDir.of(out).reproduce_path,
        env_reference_hash=measured.reference_hash, env_current_hash=measured.current_hash,
        env_differences=measured.differences, submit_env=submit, failures=failures,
        timing_changes=changed, timing_undecided=undecided, strict_timing=strict_timing,
        fail_on_inconclusive=fail_on_inconclusive, timing_counts=dict(tcounts), counts=dict(counts),
    )
    _write_report(verdict, bundle, policy, timing, result.points)
    return verdict
