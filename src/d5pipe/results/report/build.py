"""Build the report's sections from a run directory and write ``report.html`` and ``report.md``."""

from __future__ import annotations

from pathlib import Path

from d5pipe.core.atomic import write_text
from d5pipe.core.stages import STAGES, load_target
from d5pipe.results.report.blocks import Report, Section
from d5pipe.results.report.checks import failures, overview, warnings
from d5pipe.results.report.html import render_html
from d5pipe.results.report.loader import RunData, load_run
from d5pipe.results.report.markdown import render_markdown
from d5pipe.results.report.node_section import node_variability
from d5pipe.results.report.sections import provenance, report_built, stage_table
from d5pipe.results.report.slurm_section import slurm_jobs
from d5pipe.rundir.layout import RunDir


def build_sections(data: RunData) -> Report:
    """All sections in page order: failures first (when any), the overview, the levels, warnings,
    provenance."""
    sections: list[Section] = []
    fail = failures(data)
    if fail is not None:
        sections.append(fail)
    sections.append(overview(data))
    for stage in data.stages:
        entry = STAGES.get(stage)
        level = load_target(entry.report)(data) if entry is not None else Section(stage, stage)
        level.subsections.append(stage_table(data, stage))
        sections.append(level)
    nodes = node_variability(data)
    if nodes is not None:
        sections.append(nodes)
    jobs = slurm_jobs(data)
    if jobs is not None:
        sections.append(jobs)
    warn = warnings(data)
    if warn is not None:
        sections.append(warn)
    sections.append(provenance(data))
    m = data.manifest
    name = str(m.get("experiment") or data.config.get("name") or data.run_dir.name)
    report_cfg = data.config.get("report")
    title = str(report_cfg.get("title") or "") if isinstance(report_cfg, dict) else ""
    subtitle = (f"experiment {name} · {len(data.results['point_id'].unique())} points · "
                f"stages {', '.join((STAGES[s].title if s in STAGES else s) for s in data.stages)} · "
                f"run created {m.get('created', '?')} · report built {report_built()}")
    return Report(title or f"d5pipe report: {name}", subtitle, sections)


def build_report(run_dir: Path, checked: bool = False) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` into ``run_dir``; returns their paths.
    ``checked``: see d5pipe.results.report.loader.load_run."""
    run_dir = Path(run_dir)
    report = build_sections(load_run(run_dir, checked))
    rd = RunDir(run_dir)
    html_path, md_path = rd.report_html, rd.report_md
    write_text(html_path, render_html(report))
    write_text(md_path, render_markdown(report))
    return html_path, md_path
