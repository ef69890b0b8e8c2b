"""The timeline as one self-contained HTML file: no script, no request to anywhere.

Every value goes through Jinja2's autoescaping (the template never marks trace
content safe), and a Content-Security-Policy meta tag of ``default-src 'none'``
forbids scripts, frames, images, fonts and connections even if something got
through; the one inline stylesheet is allowed by its hash, so an injected
``<style>`` would not apply either.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from jinja2 import Environment, StrictUndefined, Template
from markupsafe import Markup

from pipelines.debug.timeline import Timeline, segments

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3em; } dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; }
dt { color: #666; } dd { margin: 0; }
section.step { border-left: 4px solid #ccc; padding: .4em .9em; margin: 1em 0; }
section.llm_call { border-color: #0a7ea4; } section.tool { border-color: #b58900; }
section.state { border-color: #8e44ad; } section.violation { border-color: #c0392b; background: #fff5f4; }
.marker { color: #c0392b; font-weight: bold; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6; padding: .5em; margin: .2em 0 .6em; }
mark.redacted { background: #e8dcf5; color: #5b2c83; }
p.finding { color: #c0392b; margin: .2em 0; }
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<title>trace {{ t.trace_id }}</title>
<style>{{ style | safe }}</style>
</head>
<body>
<h1>trace {{ t.trace_id }}</h1>
<dl class="facts">
{%- for k, v in t.facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}
</dl>
{%- for s in t.steps %}
<section class="step {{ s.kind }}{% if s.violations %} violation{% endif %}" id="step-{{ s.number }}">
<h2>step {{ s.number }} · {{ s.title }}{% if s.status and s.status != "ok" %} [{{ s.status }}]{% endif %}
{%- if s.at %} <small>{{ s.at }}</small>{% endif %}
{%- if s.first_violation %} <span class="marker">&lt;&lt;&lt; FIRST VIOLATION</span>{% endif %}</h2>
<dl class="facts">
{%- for k, v in s.facts %}<dt>{{ k }}</dt><dd>{{ pieces(v) }}</dd>{% endfor %}
</dl>
{%- for item in s.texts if item.value %}
<div class="label">{{ item.label }}</div><pre>{{ pieces(item.value) }}</pre>
{%- endfor %}
{%- for v in s.violations %}<p class="finding">state violation: {{ v }}</p>{% endfor %}
{%- for f in s.findings %}<p class="finding">semantic error: {{ f }}</p>{% endfor %}
</section>
{%- endfor %}
{%- for f in t.unplaced_findings %}<p class="finding">(no step) {{ f }}</p>{% endfor %}
<footer><small>tracelake show --html · redaction placeholders are <mark class="redacted">marked</mark></small></footer>
</body>
</html>
"""


PIECES = (
    '{% for p, ph in parts %}{% if ph %}<mark class="redacted">{{ p }}</mark>{% else %}{{ p }}{% endif %}{% endfor %}'
)


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The one Jinja2 environment of tracelake's HTML reports: autoescaping, strict, and ``pieces(value)``
    to show redaction placeholders marked (what it returns is Markup of an autoescaping template's
    output: trace text itself is never marked safe)."""
    env = Environment(autoescape=True, undefined=StrictUndefined)
    pieces = env.from_string(PIECES)
    env.globals["pieces"] = lambda value: Markup(pieces.render(parts=segments(str(value))))
    return env


@lru_cache(maxsize=1)
def _template() -> Template:
    return environment().from_string(TEMPLATE)


def content_security_policy(style: str = STYLE) -> str:
    """Nothing may load or run; the one inline stylesheet ``style`` is allowed by its hash."""
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    return f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"


def render_html(timeline: Timeline) -> str:
    return _template().render(t=timeline, style=STYLE, csp=content_security_policy())
