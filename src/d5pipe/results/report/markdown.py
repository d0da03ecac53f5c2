"""Render a :class:`~d5pipe.results.report.blocks.Report` as Markdown for terminals (figures are named, not drawn)."""

from __future__ import annotations

from d5pipe.results.report.blocks import Block, Figure, Pre, Report, Section, Table, Text

_TONE = {"plain": "", "note": "_note:_ ", "warn": "**warning:** ", "bad": "**FAIL:** ", "good": "**ok:** "}


def _cell(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.split())


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return _TONE.get(block.tone, "") + " ".join(block.text.split())
    if isinstance(block, Table):
        lines = [f"*{_cell(block.caption)}*", ""] if block.caption else []
        lines.append("| " + " | ".join(_cell(c) for c in block.columns) + " |")
        lines.append("|" + "---|" * len(block.columns))
        for i, row in enumerate(block.rows):
            mark = "**!** " if i in block.bad_rows else ""
            cells = [_cell(c) for c in row]
            if cells:
                cells[0] = mark + cells[0]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if isinstance(block, Figure):
        return f"_(figure in report.html: {_cell(block.caption or block.alt)})_"
    if isinstance(block, Pre):
        fence = "~~~~" if "~~~~" not in block.text else "~~~~~~~~"
        head = f"**{_cell(block.summary)}**\n\n" if block.summary else ""
        return f"{head}{fence}\n{block.text.rstrip()}\n{fence}"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _section(section: Section, depth: int = 2) -> str:
    parts = ["#" * depth + " " + " ".join(section.title.split())]
    parts += [_block(b) for b in section.blocks]
    parts += [_section(s, depth + 1) for s in section.subsections]
    return "\n\n".join(parts)


def render_markdown(report: Report) -> str:
    head = f"# {' '.join(report.title.split())}\n\n{' '.join(report.subtitle.split())}"
    return "\n\n".join([head, *(_section(s) for s in report.sections)]) + "\n"
