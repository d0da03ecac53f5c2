"""The report's content model: sections made of blocks, rendered by html.py and markdown.py.

Sections are built once from the run's data (sections.py, levels.py); the renderers only format
them, so the HTML page and the Markdown file always say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Text:
    """A paragraph. ``tone`` colours it (``warn`` / ``bad`` / ``good``) in HTML."""

    text: str
    tone: Literal["plain", "note", "warn", "bad", "good"] = "plain"


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    bad_rows: set[int] = field(default_factory=set)
    """Row indices to highlight as failures."""
    wrap: set[int] = field(default_factory=set)
    """Column indices of prose (reasons, parameters): kept at least 14em wide, line breaks kept."""


@dataclass
class Figure:
    png: bytes
    alt: str
    caption: str = ""


@dataclass
class Pre:
    """Preformatted text (config, environment), optionally collapsed under ``summary``."""

    text: str
    summary: str = ""


Block = Text | Table | Figure | Pre


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass
class Report:
    title: str
    subtitle: str
    sections: list[Section]
