"""The renderer's caches and shortcuts never change an answer: a cached render is
reused only when the template could not have told the inputs apart, the probe is
skipped only for templates that reach no clock or randomness, and the request
assembled from pieces is byte for byte the canonical request."""

from __future__ import annotations

import json

import pytest

from pipelines.record.canonical import canonical_json
from pipelines.rot.ingredients import TemplateVersion
from pipelines.rot.rerender import Renderer, canonical_object
from pipelines.rot.template_inputs import DocRef
from tests.rot.conftest import TODAY


def _render(renderer: Renderer, source: str, scores: tuple[float, ...]) -> str:
    template = TemplateVersion("t", "v1", source)
    docs = [DocRef(f"d{i}", "x" * (40 + 20 * i), s) for i, s in enumerate(scores)]
    return renderer.system(template, "{}", docs).text


@pytest.mark.parametrize(
    "source",
    [
        "{% for d in documents %}{% if d.text|length > 50 %}{{ d.score }}{% endif %}{% endfor %}",
        "{% for d in documents %}{{ d }}{% endfor %}",
        "{% for d in documents %}{{ d.get('score') }}{% endfor %}",
        "{% for d in documents %}{% for k, v in d.items() %}{{ v }}{% endfor %}{% endfor %}",
        "{{ documents|tojson }}",
        "{% for d in documents %}{{ d['score'] }}{% endfor %}",
    ],
)
def test_a_template_that_reads_scores_is_rendered_again_for_other_scores(source):
    renderer = Renderer(TODAY)
    first = _render(renderer, source, (0.1, 0.2))
    second = _render(renderer, source, (0.7, 0.9))
    assert first != second


def test_a_template_that_never_reads_scores_is_rendered_once_per_doc_set():
    renderer = Renderer(TODAY)
    source = "{% for d in documents %}<{{ d.doc_id }}>{{ d.text }}{% endfor %}"
    first = renderer.system(TemplateVersion("t", "v1", source), "{}", [DocRef("a", "x", 0.1)])
    again = renderer.system(TemplateVersion("t", "v1", source), "{}", [DocRef("a", "x", 0.9)])
    assert again is first
    other = renderer.system(TemplateVersion("t", "v1", source), "{}", [DocRef("a", "y", 0.1)])
    assert other.text != first.text


@pytest.mark.parametrize(
    ("source", "impure"),
    [
        ("Today is {{ now().strftime('%A') }}.", True),
        ("Tag {{ (random() * 100) | int }}", True),
        ("{{ lipsum(1) }}", True),
        ("{{ ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'] | random }}{{ [1, 2, 3, 4, 5, 6, 7, 8, 9] | random }}", True),
        ("{% set clock = now %}{{ clock().year }}", True),
        ("Hello {{ name }}, {{ range(3) | list }}", False),
    ],
)
def test_templates_that_reach_a_clock_or_randomness_are_probed(source, impure):
    template = TemplateVersion("t", "v1", source)
    assert template.reaches_impurity == impure
    if impure:
        assert Renderer(TODAY).system(template, '{"name": "x"}', []).impure
    else:
        assert not Renderer(TODAY).system(template, '{"name": "x"}', []).impure


def test_a_request_assembled_from_pieces_is_the_canonical_request():
    request = {
        "model": "m",
        "system": "Olá — sistema ✓",
        "messages": [{"role": "user", "content": [{"type": "text", "text": 'ünïcode "q" \\ \n'}]}],
        "tools": [{"name": "t", "input_schema": {"b": 1, "a": [1, 2.5, None]}}],
        "max_tokens": 10,
        "temperature": 0.0,
        "ñ_extra": {"z": True},
        "metadata": {"user_id": "u"},
    }
    pieces = {k: canonical_json(v) for k, v in request.items()}
    assert canonical_object(pieces) == canonical_json(request)
    assert json.loads(canonical_object(pieces)) == json.loads(canonical_json(request))


@pytest.mark.parametrize(
    ("source", "from_pieces"),
    [
        ('{{ company }}\n{% for d in documents %}<doc id="{{ d.doc_id }}">\n{{ d.text }}\n</doc>\n{% endfor %}', True),
        (
            "{% for d in documents %}[{{ d['doc_id'] }}] {{ d.text|upper }} {{ '%.2f'|format(d.score) }}{% endfor %}",
            True,
        ),
        ("{% for d in documents %}{{ loop.index }}. {{ d.text }}{% else %}none{% endfor %}", True),
        ("{% for d in documents %}{% for e in documents %}{{ d.doc_id }}{{ e.doc_id }},{% endfor %}{% endfor %}", True),
        # the skeleton reads a document itself, or prints it whole: rendered in full
        ("{% for d in documents %}{% if d.text|length > 50 %}{{ d.text }}{% endif %}{% endfor %}", False),
        ("{% for d in documents %}{{ d }}{% endfor %}", False),
        ("{% for d in documents %}{{ d.doc_id ~ loop.index }}{% endfor %}", False),
        ("{{ documents|map(attribute='text')|join('|') }}", False),
    ],
)
def test_a_template_rendered_from_skeleton_and_slots_gives_the_full_rendering(source, from_pieces):
    """Renderer renders document loops from a skeleton per variables and document count and
    a slot per document: the same text and canonical JSON as Jinja rendering it whole."""
    from pipelines.rot.render import render_template

    template = TemplateVersion("t", "v1", source)
    renderer = Renderer(TODAY)
    two = [DocRef("kb-a", "a" * 60, 0.5), DocRef("kb-b", "b", 0.25)]
    assert (renderer._counted(template, '{"company": "Acme"}', two) is not None) == from_pieces
    for n, scores in ((0, ()), (1, (0.5,)), (3, (0.25, 0.125, 0.9)), (3, (0.3, 0.125, 0.9))):
        docs = [DocRef(f"kb-{i}", f'text {i} with "quotes"\nünïcode ' + "x" * 30 * i, s) for i, s in enumerate(scores)]
        got = renderer.system(template, '{"company": "Acme"}', docs)
        full = render_template(
            source,
            {"company": "Acme"},
            [{"doc_id": d.doc_id, "text": d.text, "score": d.score} for d in docs],
            clock=TODAY,
        )
        assert got.text == full and got.canonical == canonical_json(full), (n, scores)
        assert got.error is None and not got.impure
