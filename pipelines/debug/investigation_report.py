"""An investigation as one report, drawn twice from the same model: rich blocks for the terminal
and one self-contained HTML file (the rules of `show --html`: Jinja2 autoescaping, trace text never
marked safe, a Content-Security-Policy of ``default-src 'none'`` with the one stylesheet allowed by
its hash, so nothing in the file can run or load anything).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from jinja2 import Template
from rich.console import Group, RenderableType
from rich.table import Table as RichTable
from rich.text import Text

from pipelines.debug.report_html import STYLE, content_security_policy, environment
from pipelines.debug.terminal import value_text
from pipelines.printable import inert


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    chosen: int | None = None  # the row the step picked, marked


@dataclass
class Section:
    id: str
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)  # long values: an output, an input


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section] = field(default_factory=list)
    conclusion: str = ""
    next_steps: list[str] = field(default_factory=list)


# -- terminal -------------------------------------------------------------------------------------


def _table(table: Table) -> RichTable:
    out = RichTable(title=Text(inert(table.title)), title_justify="left")
    for i, column in enumerate(table.columns):
        out.add_column(inert(column), overflow="fold", justify="left" if i else "right")
    for n, row in enumerate(table.rows):
        out.add_row(*(Text(inert(cell)) for cell in row), style="bold" if n == table.chosen else None)
    return out


def render_section(section: Section) -> RenderableType:
    """One step of the report, printed as soon as it is done."""
    parts: list[RenderableType] = [Text(inert(section.title), style="bold cyan")]
    parts += [Text("  ").append_text(value_text(line)) for line in section.lines]
    for label, value in section.texts:
        parts.append(Text(f"  {inert(label)}:", style="dim"))
        parts.append(Text("    ").append_text(value_text(value)))
    parts += [_table(t) for t in section.tables]
    return Group(*parts, Text(""))


def render_conclusion(report: Report) -> RenderableType:
    parts: list[RenderableType] = [
        Text("Conclusion", style="bold cyan"),
        Text("  ").append_text(Text(inert(report.conclusion), style="bold")),
    ]
    parts += [Text("  ").append_text(Text(inert(step))) for step in report.next_steps]
    return Group(*parts)


# -- HTML -----------------------------------------------------------------------------------------

INVESTIGATION_STYLE = (
    STYLE
    + """
table { border-collapse: collapse; margin: .5em 0 1em; } caption { text-align: left; font-weight: bold; }
th, td { border: 1px solid #ccc; padding: .2em .5em; vertical-align: top; text-align: left; }
tr.chosen td { background: #eef7fb; font-weight: bold; }
p.conclusion { font-size: 1.15em; font-weight: bold; border-left: 4px solid #c0392b; padding: .4em .9em; }
section.step h2 { font-size: 1.1em; }
"""
)

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<title>{{ r.title }}</title>
<style>{{ style | safe }}</style>
</head>
<body>
<h1>{{ r.title }}</h1>
<dl class="facts">
{%- for k, v in r.facts %}<dt>{{ k }}</dt><dd>{{ pieces(v) }}</dd>{% endfor %}
</dl>
<section id="conclusion"><h2>Conclusion</h2><p class="conclusion">{{ r.conclusion }}</p>
{%- for s in r.next_steps %}<p>{{ s }}</p>{% endfor %}</section>
{%- for s in r.sections %}
<section class="step" id="{{ s.id }}">
<h2>{{ s.title }}</h2>
{%- for line in s.lines %}<p>{{ pieces(line) }}</p>{% endfor %}
{%- for label, value in s.texts %}<div class="label">{{ label }}</div><pre>{{ pieces(value) }}</pre>{% endfor %}
{%- for t in s.tables %}
<table id="{{ t.id }}"><caption>{{ t.title }}</caption>
<tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{%- for row in t.rows %}
<tr{% if loop.index0 == t.chosen %} class="chosen"{% endif %}>
{%- for cell in row %}<td>{{ pieces(cell) }}</td>{% endfor %}</tr>
{%- endfor %}
</table>
{%- endfor %}
</section>
{%- endfor %}
<footer><small>tracelake investigate · redaction placeholders are <mark class="redacted">marked</mark> ·
no script, nothing loaded from anywhere</small></footer>
</body>
</html>
"""


@lru_cache(maxsize=1)
def _template() -> Template:
    return environment().from_string(TEMPLATE)


def render_html(report: Report) -> str:
    return _template().render(r=report, style=INVESTIGATION_STYLE, csp=content_security_policy(INVESTIGATION_STYLE))
