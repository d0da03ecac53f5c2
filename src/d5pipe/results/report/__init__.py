"""The run report: ``report.html`` (self-contained) and ``report.md`` from a run directory.

Built from results.parquet, manifest.json, config.yaml, reproduce.json and aggregate's side tables
(warnings.parquet, curves.parquet; the point records when those are absent). Nothing is re-run.
The work is in :mod:`d5pipe.results.report.build`; this package face imports it only when called,
so light helpers (``d5pipe.results.report.units``) load without pandas' plotting stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from d5pipe.results.report.blocks import Report
    from d5pipe.results.report.loader import RunData

__all__ = ["build_report", "build_sections"]


def build_sections(data: RunData) -> Report:
    """All sections in page order: failures first (when any), the overview, the levels, warnings,
    provenance."""
    from d5pipe.results.report.build import build_sections as build

    return build(data)


def build_report(run_dir: Path, checked: bool = False) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` into ``run_dir``; returns their paths.
    ``checked``: results.parquet was just written with the current checks (not re-checked)."""
    from d5pipe.results.report.build import build_report as build

    return build(run_dir, checked)
