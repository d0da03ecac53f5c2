"""The bodies of the Snakemake jobs, with stdout and stderr sent to the rule's log file.

* shard jobs (``level0``..``level3`` rules): ``python -m d5pipe.execute.jobs STAGE SHARD MARKER LOG``
  from the rule's ``shell:`` (d5pipe.execute.snakefile_api.shard_shell) -- no Snakemake import in
  the job, which a ``script:`` job pays;
* ``prepare_data``: ``workflow/scripts/prepare_data.py`` calls :func:`prepare_data_job` with the
  ``snakemake`` object; ``build_operator``: ``workflow/scripts/build_operator.py``, :func:`build_operator_job`;
* ``report``: :func:`report_in_process`, in Snakemake's own process.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

    from d5pipe.results.verdicts import RunVerdict


@contextlib.contextmanager
def _logged_to(log: Path | None) -> Iterator[None]:
    from d5pipe.measure.process import exit_with_parent

    exit_with_parent()  # a job never outlives the Snakemake (and so the d5pipe run) that started it
    if "D5PIPE_SLURM_CONF" in os.environ:  # srun/squeue in the job talk to the run's cluster
        os.environ.setdefault("SLURM_CONF", os.environ["D5PIPE_SLURM_CONF"])
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as fh:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = fh
        try:
            yield
        finally:
            sys.stdout, sys.stderr = old_out, old_err


SHARD_NAME = re.compile(r"^s[0-9]{5}$")


def shard_main(argv: list[str]) -> int:
    """``STAGE SHARD MARKER LOG``: run one shard in the run directory (the job's cwd)."""
    from d5pipe.levels.registry import STAGES

    if len(argv) != 4 or argv[0] not in STAGES or not SHARD_NAME.match(argv[1]):
        print(f"usage: python -m d5pipe.execute.jobs STAGE sNNNNN MARKER LOG (got {argv!r})", file=sys.stderr)
        return 2
    stage, shard, marker, log = argv
    from d5pipe.core.errors import DiskFull, is_disk_full
    from d5pipe.execute.shard import run_shard
    from d5pipe.measure.process import exit_now

    try:
        with _logged_to(Path(log)):
            run_shard(Path("."), stage, shard, Path(marker))
    except (DiskFull, OSError) as err:  # the records written so far stay; Snakemake names exit 75
        if isinstance(err, OSError) and not is_disk_full(err):
            raise
        full = err if isinstance(err, DiskFull) else DiskFull.at(err.filename or log)
        print(f"d5pipe: error: {full}", file=sys.stderr, flush=True)
        return full.exit_code
    # end now: the outputs are written and synced, and tearing down an interpreter that imported torch
    # costs most of a second per job (exit_now still runs the exit handlers: libraries clean up there)
    exit_now(0)


def prepare_data_job(smk: Any) -> None:
    """Materialise one dataset (``prepare_data`` rule) and write its metadata beside it."""
    from d5pipe.core.atomic import write_json
    from d5pipe.levels.datasets import prepare
    from d5pipe.rundir.data_cache import store
    from d5pipe.rundir.layout import RunDir

    with _logged_to(Path(str(smk.log[0])) if len(smk.log) else None):
        key = str(smk.wildcards.dataset)
        t0 = time.perf_counter()
        meta = prepare(RunDir.of(".").index["datasets"][key], Path(str(smk.output.data)))
        seconds = time.perf_counter() - t0
        write_json(Path(str(smk.output.meta)), {"key": key, **meta})
        if meta.get("storage", "memory") == "memory":  # the cache holds one file a dataset
            store(key, Path(str(smk.output.data)), {"key": key, **meta}, seconds)  # for other run directories
        print(f"prepared dataset {key} in {seconds:.1f} s: {meta.get('checksum')}")


def build_operator_job(smk: Any) -> None:
    """Build one compiled operator into the user cache (``build_operator`` rule), or reuse the binary a
    run built before; a failed build is tried again once per run. Its record is the rule's output: the
    points that need it read the outcome (a compile error fails them alone)."""
    from d5pipe.core.atomic import write_json
    from d5pipe.levels.level0.compiled import build, spec_of
    from d5pipe.rundir.layout import RunDir

    with _logged_to(Path(str(smk.log[0])) if len(smk.log) else None):
        key = str(smk.wildcards.build)
        spec = spec_of(RunDir.of(".").index["builds"][key])
        record = build(spec, retry_failed=True)
        write_json(Path(str(smk.output[0])), {"planned_key": key, **record})
        print(f"build {key} of {spec.package}: {record['status']} ({record['outcome']}, key {record['key']})"
              + (f"\n{record['error']}" if record["status"] != "ok" else ""))


_PRELOAD: threading.Thread | None = None
"""The thread of :func:`preload_report`, which the report job waits for."""
REPORT_MODULES = ("pyarrow.parquet", "pyarrow.dataset", "pyarrow.pandas_compat", "matplotlib.figure",
                  "matplotlib.backends.backend_agg", "PIL.PngImagePlugin",
                  "d5pipe.results.run_results", "d5pipe.results.collect", "d5pipe.results.acceptance",
                  "d5pipe.results.accounting", "d5pipe.results.report", "d5pipe.results.report.build")
"""What the report job imports besides the levels' report sections (imported by
:func:`preload_report` so that the job itself does not wait for them)."""


def preload_report(main_process: bool) -> None:
    """In the Snakemake process that will run the ``report`` rule (a ``run:`` local rule): import
    the report's libraries in a background thread while the shard jobs run, so the report starts
    at once when they are done. Nothing in remote or job processes."""
    global _PRELOAD
    if not main_process:
        return
    import threading

    def load() -> None:
        import importlib

        from d5pipe.execute.deferred_import import resolve_all

        try:
            resolve_all()  # the real modules, before anything below binds their stand-ins
            for name in REPORT_MODULES:  # the report's build imports each level's section (and its plots)
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the report job itself reports any problem
            pass

    _PRELOAD = threading.Thread(target=load, name="d5pipe-report-preload", daemon=True)
    _PRELOAD.start()


def write_outputs(run_dir: Path) -> RunVerdict:
    """The run's results in one pass (d5pipe.results.run_results), written once: results.parquet
    and its side tables, verdict.json, the manifest's datasets and measured environments, then
    report.html/.md from the same value; returns the run's verdict."""
    from d5pipe.results.report import build_report
    from d5pipe.results.run_results import build_results, write_results
    from d5pipe.rundir.layout import RunDir
    from d5pipe.rundir.manifest import finalize_manifest

    rd = RunDir.of(run_dir)
    res = build_results(rd, accounting=True)
    write_results(res)
    hashes = res.frame["env_hash"].dropna()
    finalize_manifest(rd.root, [str(h) for h in hashes.value_counts().index if str(h)])
    build_report(res)
    return res.verdict


def report_in_process(output: Any, log: Any) -> None:
    """Records -> results.parquet (checks, verdicts), report.html/.md and verdict.json: the body
    of the ``report`` rule, run in a thread of the Snakemake process (no new interpreter, no
    imports; see :func:`preload_report`). Its log gets one line, or the traceback of a failure."""
    import traceback

    log_path = Path(str(log[0]))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if _PRELOAD is not None:
        _PRELOAD.join()  # its imports are this job's; no second thread imports the same modules
    try:
        write_outputs(Path("."))
    except BaseException:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        raise
    with open(log_path, "a", encoding="utf-8") as fh:
        fh.write(f"results, report and verdict written in {time.perf_counter() - t0:.3f} s\n")


if __name__ == "__main__":
    raise SystemExit(shard_main(sys.argv[1:]))
