"""Render a :class:`~d5pipe.results.report.blocks.Report` as one self-contained HTML page: the
Jinja2 template ``templates/report.html.j2``, autoescaped (config values, parameters and error
texts are user data)."""

from __future__ import annotations

import base64
from functools import cache

import jinja2

from d5pipe.results.report.blocks import Figure, Report, Table, Text


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("d5pipe.results.report"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.tests.update(text=lambda b: isinstance(b, Text), table=lambda b: isinstance(b, Table),
                     figure=lambda b: isinstance(b, Figure))
    env.filters["b64"] = lambda png: base64.b64encode(png).decode("ascii")
    return env.get_template("report.html.j2")


def render_html(report: Report) -> str:
    return _template().render(report=report)
