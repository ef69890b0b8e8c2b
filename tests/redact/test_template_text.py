"""A templated system prompt's own text (``template_text``): what the template
writes is found by its literal parts and the words next to a name, and a
template id or version from a trace never reads outside the store."""

from __future__ import annotations

from pipelines.redact.template_text import in_template_text, literal_parts
from pipelines.resources.stores import TemplateStore

TEMPLATE = (
    "You are {{ company }}'s assistant. Your supervisor is Rafael Nogueira.\n"
    "{% for d in documents %}<document>\n{{ d.text }}\n</document>{% endfor %}\n"
    "Rafael Nogueira\n"
    "Be brief."
)


def span(text: str, name: str, nth: int = 0) -> tuple[int, int]:
    at = -1
    for _ in range(nth + 1):
        at = text.index(name, at + 1)
    return at, at + len(name)


def test_the_literal_parts_are_the_template_text_between_its_tags():
    assert literal_parts(TEMPLATE) == (
        "\n</document>",
        "\nRafael Nogueira\nBe brief.",
        "'s assistant. Your supervisor is Rafael Nogueira.\n",
        "<document>\n",
        "You are ",
    )
    assert literal_parts("{% if %}") == ()  # does not parse: nothing is the operator's


def test_a_name_is_the_templates_where_its_neighbours_are_the_templates_words():
    parts = literal_parts(TEMPLATE)
    text = (
        "You are Acme's assistant. Your supervisor is Rafael Nogueira.\n<document>\nAsk Rafael Nogueira.\n</document>"
    )
    assert in_template_text(text, *span(text, "Rafael Nogueira"), parts)
    assert not in_template_text(text, *span(text, "Rafael Nogueira", 1), parts)  # inside a document
    edited = "Your supervisor is Rafael Nogueira, from today on."  # the words after it changed: before is enough
    assert in_template_text(edited, *span(edited, "Rafael Nogueira"), parts)
    moved = "Call Rafael Nogueira now."
    assert not in_template_text(moved, *span(moved, "Rafael Nogueira"), parts)
    own_line = "</document>\nRafael Nogueira\nBe brief."  # the template's line, the line after it too
    assert in_template_text(own_line, *span(own_line, "Rafael Nogueira"), parts)
    other_line = "Hello\nRafael Nogueira\nBye"
    assert not in_template_text(other_line, *span(other_line, "Rafael Nogueira"), parts)
    assert not in_template_text("Rafael Nogueira", 0, 15, parts)  # nothing around it to compare


def test_a_template_id_or_version_that_is_not_a_file_name_is_not_looked_up(tmp_path):
    (tmp_path / "templates" / "support").mkdir(parents=True)
    (tmp_path / "templates" / "support" / "v1.j2").write_text("Hello {{ name }}")
    (tmp_path / "secret.j2").write_text("not a template of the store")
    store = TemplateStore(uri=str(tmp_path))
    assert store.source("support", "v1") == "Hello {{ name }}"
    assert store.source("support", "v2") is None
    assert store.source("..", "secret") is None
    assert store.source("support/../..", "secret") is None
    assert store.source("", "v1") is None
    (tmp_path / "templates" / "support" / "v3.j2").write_bytes(b"\xff\xfe")
    assert store.source("support", "v3") is None  # not UTF-8: the prompt is read whole
