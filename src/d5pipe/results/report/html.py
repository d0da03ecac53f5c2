"""Render a :class:`~d5pipe.results.report.blocks.Report` as one self-contained HTML page.

Inline CSS, images as base64 PNG data URIs, no script and no external URL. Every piece of text
goes through :func:`html.escape` (config values, parameters and error texts are user data).
"""

from __future__ import annotations

import base64
from html import escape

from d5pipe.results.report.blocks import Block, Figure, Pre, Report, Section, Table, Text

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 28px 48px}
header{background:#1f3a5f;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:1.6em} header p{margin:0;opacity:.85}
nav{background:#eef2f7;padding:8px 28px;font-size:.92em} nav a{margin-right:14px;color:#1f3a5f}
h2{border-bottom:2px solid #d6dde8;padding-bottom:4px;margin-top:36px} h3{margin-top:24px}
table{border-collapse:collapse;margin:10px 0 18px;font-size:.86em;max-width:100%}
th,td{border:1px solid #d6dde8;padding:3px 8px;text-align:left;vertical-align:top;white-space:normal;
word-break:normal;overflow-wrap:anywhere}
td.wrap{white-space:pre-line;min-width:14em;max-width:560px}
th{background:#eef2f7} tr:nth-child(even) td{background:#fafbfd}
tr.bad td{background:#fde8e8;color:#8a1020}
caption{caption-side:top;text-align:left;font-weight:600;padding:4px 0;color:#3b4a60}
figure{display:inline-block;vertical-align:top;margin:10px 18px 20px 0;max-width:100%} figure img{max-width:100%;border:1px solid #e3e8ef}
figcaption{font-size:.86em;color:#4a5870;margin-top:4px;max-width:560px}
pre{background:#f5f7fa;border:1px solid #e3e8ef;padding:10px;overflow-x:auto;font-size:.82em;max-height:480px}
details{margin:10px 0} summary{cursor:pointer;font-weight:600;color:#1f3a5f}
p.note{color:#4a5870;font-size:.9em} p.warn{background:#fff6df;border-left:4px solid #e0a800;padding:6px 10px}
p.bad{background:#fde8e8;border-left:4px solid #c0182b;padding:6px 10px;color:#8a1020}
p.good{background:#e6f6ea;border-left:4px solid #2e8b47;padding:6px 10px}
section.failures h2{color:#a3101f}
@media print{main{max-width:none;padding:0} table{font-size:.72em} figure{break-inside:avoid}}
"""
# Tables never scroll sideways: their cells wrap (long IDs break anywhere), so every column is on
# screen, in a screenshot and in print (tests/test_report_browser.py checks 1400 px).


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return f'<p class="{escape(block.tone)}">{escape(block.text)}</p>'
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(c)}</th>" for c in block.columns)
        body = []
        for i, row in enumerate(block.rows):
            cls = ' class="bad"' if i in block.bad_rows else ""
            cells = "".join(f'<td class="wrap">{escape(str(c))}</td>' if j in block.wrap else
                            f"<td>{escape(str(c))}</td>" for j, c in enumerate(row))
            body.append(f"<tr{cls}>{cells}</tr>")
        cap = f"<caption>{escape(block.caption)}</caption>" if block.caption else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if isinstance(block, Figure):
        data = base64.b64encode(block.png).decode("ascii")
        cap = f"<figcaption>{escape(block.caption)}</figcaption>" if block.caption else ""
        return f'<figure><img alt="{escape(block.alt)}" src="data:image/png;base64,{data}">{cap}</figure>'
    if isinstance(block, Pre):
        pre = f"<pre>{escape(block.text)}</pre>"
        return f"<details><summary>{escape(block.summary)}</summary>{pre}</details>" if block.summary else pre
    raise TypeError(f"unknown report block {type(block).__name__}")


def _section(section: Section, depth: int = 2) -> str:
    sid = escape(section.id)
    parts = [f'<section id="{sid}" class="{sid}"><h{depth}>{escape(section.title)}</h{depth}>']
    parts += [_block(b) for b in section.blocks]
    parts += [_section(s, depth + 1) for s in section.subsections]
    parts.append("</section>")
    return "\n".join(parts)


def render_html(report: Report) -> str:
    nav = " ".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in report.sections)
    body = "\n".join(_section(s) for s in report.sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{escape(report.title)}</h1><p>{escape(report.subtitle)}</p></header>"
        f"<nav>{nav}</nav><main>{body}</main></body></html>\n"
    )
