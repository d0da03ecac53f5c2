"""Build the report's sections from a run directory and write ``report.html`` and ``report.md``."""

from __future__ import annotations

from pathlib import Path

from d5pipe.core.atomic import write_text
from d5pipe.levels.registry import STAGES
from d5pipe.results.report.blocks import Report
from d5pipe.results.report.html import render_html
from d5pipe.results.report.levels import SECTIONS
from d5pipe.results.report.levels.common import generic
from d5pipe.results.report.loader import RunData, report_data
from d5pipe.results.report.markdown import render_markdown
from d5pipe.results.report.node_section import node_variability
from d5pipe.results.report.profile_section import profiles
from d5pipe.results.report.sections import provenance, report_built, stage_table
from d5pipe.results.report.slurm_section import slurm_jobs
from d5pipe.results.report.verdict_sections import failures, overview, warnings
from d5pipe.results.run_results import RunResults, build_results


def build_sections(data: RunData) -> Report:
    """All sections in page order: failures first (when any), the overview, the levels, warnings,
    provenance."""
    sections = [s for s in (failures(data), overview(data)) if s is not None]
    for stage in data.stages:
        entry = STAGES.get(stage)
        make = SECTIONS.get(stage)
        level = make(data) if make is not None else generic(data, stage, entry.title if entry else stage)
        level.subsections.append(stage_table(data, stage))
        sections.append(level)
    sections += [s for s in (profiles(data), node_variability(data), slurm_jobs(data), warnings(data), provenance(data))
                 if s is not None]
    m = data.manifest
    name = str(m.get("experiment") or data.config.get("name") or data.res.run_dir.root.name)
    report_cfg = data.config.get("report")
    title = str(report_cfg.get("title") or "") if isinstance(report_cfg, dict) else ""
    subtitle = (f"experiment {name} · {len(data.results['point_id'].unique())} points · "
                f"stages {', '.join((STAGES[s].title if s in STAGES else s) for s in data.stages)} · "
                f"run created {m.get('created', '?')} · report built {report_built()}")
    return Report(title or f"d5pipe report: {name}", subtitle, sections)


def build_report(results: RunResults | Path) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` of a run; returns their paths. ``results``: the
    run's results (d5pipe.results.run_results), or a run directory to build them from."""
    res = results if isinstance(results, RunResults) else build_results(Path(results))
    report = build_sections(report_data(res))
    html_path, md_path = res.run_dir.report_html, res.run_dir.report_md
    write_text(html_path, render_html(report))
    write_text(md_path, render_markdown(report))
    return html_path, md_path
