"""The run report: ``report.html`` (self-contained) and ``report.md`` from a run directory.

Built from a run's results (d5pipe.results.run_results: one pass over its records), manifest.json,
config.yaml and reproduce.json. Nothing is re-run or computed twice.
The work is in :mod:`d5pipe.results.report.build`; this package face imports it only when called,
so light helpers (``d5pipe.results.report.units``) load without pandas' plotting stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from d5pipe.results.run_results import RunResults

__all__ = ["build_report"]


def build_report(results: RunResults | Path) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` of a run; returns their paths. ``results``: the
    run's results (d5pipe.results.run_results), or a run directory to build them from."""
    from d5pipe.results.report.build import build_report as build

    return build(results)
