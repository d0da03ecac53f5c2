"""Level 3: distributed data-parallel training and collective microbenchmarks.

Engines: ``ddp`` (torch DistributedDataParallel, gloo on CPU / nccl on CUDA), ``horovod``
(horovod.torch over MPI) and ``mpi`` (mpi4py, hand-written gradient allreduce). Launchers:
torchrun, mpirun, srun (:mod:`d5pipe.distributed.launch`). The stage runner is :func:`run_point`;
speedup/efficiency across points come from :func:`d5pipe.distributed.scaling.scaling_table`.

The heavy modules are imported inside the functions, so the rank workers (which import this
package) do not pay for pandas and scipy at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from d5pipe.records import PointContext, PointOutcome

if TYPE_CHECKING:
    import pandas as pd


def run_point(ctx: PointContext) -> PointOutcome:
    """Level-3 stage runner (see :mod:`d5pipe.distributed.point`)."""
    from d5pipe.distributed.point import run_point as _run_point

    return _run_point(ctx)


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup/efficiency with CIs vs the 1-rank base (see :mod:`d5pipe.distributed.scaling`)."""
    from d5pipe.distributed.scaling import scaling_table as _scaling_table

    return _scaling_table(df)


__all__ = ["run_point", "scaling_table"]
