"""The bodies of the Snakemake jobs; ``workflow/scripts/*.py`` call these with the ``snakemake`` object.

Each function reads wildcards/inputs/outputs/log from that object and calls one typed d5pipe
function, with stdout and stderr sent to the rule's log file.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def _logged(smk: Any) -> Iterator[None]:
    from d5pipe.measure.process import exit_with_parent

    exit_with_parent()  # a job never outlives the Snakemake (and so the d5pipe run) that started it
    if "D5PIPE_SLURM_CONF" in os.environ:  # srun/squeue in the job talk to the run's cluster
        os.environ.setdefault("SLURM_CONF", os.environ["D5PIPE_SLURM_CONF"])
    log = Path(str(smk.log[0])) if len(smk.log) else None
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


def _fast_exit() -> None:
    """End the job now: its outputs are written and synced, and tearing down an interpreter that
    imported torch costs most of a second per job."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def shard_job(smk: Any) -> None:
    """Run one shard (``level0``..``level3`` rules)."""
    from d5pipe.execute.shard import run_shard

    with _logged(smk):
        run_shard(Path("."), str(smk.params.stage), str(smk.wildcards.shard), Path(str(smk.output[0])))
    _fast_exit()


def prepare_data_job(smk: Any) -> None:
    """Materialise one dataset (``prepare_data`` rule) and write its metadata beside it."""
    from d5pipe.execute.workflow_api import dataset_config
    from d5pipe.levels.datasets import prepare
    from d5pipe.rundir.atomic import write_json

    with _logged(smk):
        key = str(smk.wildcards.dataset)
        meta = prepare(dataset_config(".", key), Path(str(smk.output.data)))
        write_json(Path(str(smk.output.meta)), {"key": key, **meta})
        print(f"prepared dataset {key}: {meta.get('checksum')}")


def report_job(smk: Any) -> None:
    """Records -> results.parquet (checks, verdicts), report.html/.md and verdict.json (``report`` rule)."""
    from d5pipe.results.finalize import finalize_results, write_verdict
    from d5pipe.results.report import build_report

    with _logged(smk):
        finalize_results(Path("."), Path(str(smk.output.results)))
        build_report(Path("."))
        write_verdict(Path("."))
    _fast_exit()
