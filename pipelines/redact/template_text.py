"""What the operator wrote in a templated system prompt: the template's own text.

A call that records its template (``template_id`` / ``template_version``) was
rendered from text the operator wrote (the template's literal parts) and
values: variables, documents, the clock. NER reads the rendered system prompt
like any user text (each distinct line once, ``names.LineNames``), but a name the
template's literal text writes, with the words around it, is the operator's
("Loja Aurora", a supervisor the template names) and is kept.

Everything the template as stored today does not explain is read as user
text: a variable the capture did not record, a sentence appended by the
application, a template edited in place since the call. So is the whole
prompt when the template is not in the store at all. Recording a template
never keeps a name that the template itself does not write.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import TemplateSyntaxError, nodes

from pipelines.rot.render import environment

# A literal part this short cannot hold a name
MIN_CHARS = 3
# What must surround a name as it does in the template for the name to be the template's
CONTEXT = 10


def literal_parts(source: str) -> tuple[str, ...]:
    """The template's literal text: what it writes between its tags, each part as
    rendering copies it (whitespace control applied). A template that does not parse
    has none: its prompt is read whole."""
    try:
        tree = environment().parse(source)
    except TemplateSyntaxError:
        return ()
    return tuple(sorted({data.data for data in tree.find_all(nodes.TemplateData) if len(data.data) >= MIN_CHARS}))


def in_template_text(text: str, start: int, end: int, parts: Sequence[str]) -> bool:
    """Whether the name ``text[start:end]`` is the template's own: one of its literal
    ``parts`` holds it together with the CONTEXT characters before it, or those after
    it, as the prompt has them (one side is enough: the other may be a value, or text
    edited since). A name with nothing around it is not the template's."""
    windows = [w for w in (text[max(0, start - CONTEXT) : end], text[start : end + CONTEXT]) if len(w) > end - start]
    return any(window in part for window in windows for part in parts)
