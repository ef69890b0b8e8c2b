"""Where NER reads (issue 13): user and assistant turns, tool arguments and
results, template variables, documents and system prompts; each distinct line
once per batch. In a system prompt rendered from a template the store has, a
name inside the template's own text is the operator's and is kept; a name the
template does not write (a variable not recorded, a sentence appended, a
template no longer in the store) is replaced. A name NER finds in a template
variable or a document is also replaced where the rendered system prompt
quotes it, and the regex recognizers still read everything."""

from __future__ import annotations

import gc
import json
import re

import pytest

from pipelines.redact.analyzer import DetectorSettings, TextAnalyzer
from pipelines.redact.redactor import Redactor
from tests.redact.conftest import KEYS, rows_of

BRAND = "Loja Aurora"
CUSTOMER = "Maria Eduarda Carvalho"
AUTHOR = "Rafael Nogueira"
CPF = "529.982.247-25"


# the template store of these tests: (template id, version) -> source
TEMPLATES = {
    ("support-answer", "variable"): (
        f"Você é o assistente {BRAND}. Atenda a cliente {{{{ cliente }}}} com cordialidade. "
        "CPF em cadastro: {{ cpf }}."
    ),
    ("support-answer", "document"): (
        f"Você é o assistente {BRAND}. Documentos:\n{{% for d in documents %}}<document>\n{{{{ d.text }}}}\n</document>"
        "{% endfor %}"
    ),
    ("support-answer", "operator"): f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}.",
    ("support-answer", "note"): f"Você é o assistente {BRAND}.\n{{{{ nota }}}}",
}


def templated_call(trace: str, system: str, variables: dict, documents: list[str], user: str) -> dict:
    """A call recording version ``trace`` of the template ``support-answer``."""
    return {
        "trace_id": trace,
        "occurred_at": "2026-11-20T10:00:00+00:00",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "prompt": {"template_id": "support-answer", "version": trace, "variables": variables},
        "request": {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 256,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        },
        "retrieval": {"query": "pedido", "doc_ids": [f"kb-{i}" for i in range(len(documents))], "texts": documents},
        "response": {"id": f"msg-{trace}", "content": [{"type": "text", "text": "Vou verificar."}]},
    }


def template_store(template_id: str, version: str) -> str | None:
    return TEMPLATES.get((template_id, version))


@pytest.fixture(scope="module")
def redactor():
    with Redactor(mode="placeholder", keys=KEYS, ner=True, templates=template_store) as redactor:
        yield redactor


def redact(redactor: Redactor, documents: list[dict]):
    calls, spans = rows_of(documents)
    return redactor.redact_rows(calls, spans)


def test_a_name_in_a_template_variable_is_replaced_in_both_places(redactor):
    # the name is nowhere else in the trace: only the variable and the rendered prompt
    system = f"Você é o assistente {BRAND}. Atenda a cliente {CUSTOMER} com cordialidade. CPF em cadastro: {CPF}."
    doc = templated_call("variable", system, {"cliente": CUSTOMER}, [], "Oi, meu pedido não chegou")
    (call,) = redact(redactor, [doc]).calls
    replaced = json.loads(call["template_variables_json"])["cliente"]
    assert replaced.startswith("<PERSON_") and CUSTOMER not in call["template_variables_json"]
    assert CUSTOMER not in call["system_text"] and f"cliente {replaced} com" in call["system_text"]
    request_system = json.loads(call["request_json"])["system"]
    assert request_system == call["system_text"]
    assert BRAND in call["system_text"]  # the template's own text: the operator's
    assert CPF not in call["system_text"] and "<BR_CPF_1>" in call["system_text"]  # patterns did


def test_a_name_in_a_retrieved_document_is_replaced_where_the_system_prompt_quotes_it(redactor):
    document = f"Chamado aberto por {AUTHOR} em novembro: a entrega atrasou."
    system = f"Você é o assistente {BRAND}. Documentos:\n<document>\n{document}\n</document>"
    doc = templated_call("document", system, {"idioma": "pt"}, [document], "Cadê meu pedido?")
    (call,) = redact(redactor, [doc]).calls
    (retrieved,) = call["retrieval"]["documents"]
    assert AUTHOR not in retrieved["text"] and "<PERSON_1>" in retrieved["text"]
    assert AUTHOR not in call["system_text"] and "por <PERSON_1> em" in call["system_text"]
    assert BRAND in call["system_text"]


def untemplated_call(n: int) -> dict:
    # one line differs per call (the order), the others repeat, the name among them
    system = "\n".join(
        [
            f"You are {BRAND}'s support assistant.",
            f"Order A-{100000 + n} is being discussed.",
            f"The account manager is {AUTHOR}; mention him when asked.",
            "be brief.",
        ]
    )
    return {
        "trace_id": f"plain-{n}",
        "occurred_at": f"2026-11-20T10:{n:02d}:00+00:00",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 256,
            "system": system,
            "messages": [{"role": "user", "content": "Where is my order?"}],
        },
        "response": {"id": f"msg-plain-{n}", "content": [{"type": "text", "text": "Checking."}]},
    }


def test_ner_reads_each_distinct_line_once_and_places_its_names_in_every_text():
    calls = 30
    with Redactor(mode="placeholder", keys=KEYS, ner=True) as fresh:
        result = redact(fresh, [untemplated_call(n) for n in range(calls)])
    # lines with a capital: 2 shared system lines + one order line per call + the user turn + the answer
    # ("be brief." has none: no name can be in it, NER does not read it)
    assert result.stats["ner_lines"] == 2 + calls + 2
    assert result.stats["ner_lines_reused"] > 0
    for call in result.calls:
        lines = call["system_text"].split("\n")
        assert AUTHOR not in call["system_text"]
        assert re.fullmatch(r"The account manager is <PERSON_\d>; mention him when asked\.", lines[2])
        assert lines[3] == "be brief."


def test_an_untemplated_system_prompt_is_read_by_ner(redactor):
    doc = untemplated_call(0)
    doc["request"]["system"] = f"Atenda a cliente {CUSTOMER} com cordialidade."
    (call,) = redact(redactor, [doc]).calls
    assert CUSTOMER not in call["system_text"] and "<PERSON_1>" in call["system_text"]


def test_a_name_the_template_itself_writes_is_kept(redactor):
    # a name in the template's own text is the operator's (not a variable's value)
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    doc = templated_call("operator", system, {"idioma": "pt"}, [], "Oi")
    (call,) = redact(redactor, [doc]).calls
    assert AUTHOR in call["system_text"] and BRAND in call["system_text"]


def test_a_name_the_template_does_not_write_is_replaced_and_the_brand_kept(redactor):
    # the capture recorded no ``nota``: the customer's name is in no variable, only in the prompt
    system = f"Você é o assistente {BRAND}.\nCliente em cadastro: {CUSTOMER}, atendida ontem."
    doc = templated_call("note", system, {"idioma": "pt"}, [], "Oi")
    (call,) = redact(redactor, [doc]).calls
    assert CUSTOMER not in call["system_text"] and "Cliente em cadastro: <PERSON_1>, atendida" in call["system_text"]
    assert BRAND in call["system_text"]
    assert CUSTOMER not in call["request_json"]


def test_a_template_edited_since_the_call_keeps_only_the_names_it_still_writes(redactor):
    # the template read "Seu supervisor é <AUTHOR>" when the call was made; today it names nobody
    edited = {**TEMPLATES, ("support-answer", "operator"): f"Você é o assistente {BRAND}. Seja breve."}
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    doc = templated_call("operator", system, {"idioma": "pt"}, [], "Oi")
    with Redactor(mode="placeholder", keys=KEYS, ner=True, templates=lambda i, v: edited.get((i, v))) as fresh:
        (call,) = redact(fresh, [doc]).calls
    assert AUTHOR not in call["system_text"] and BRAND in call["system_text"]


def test_a_template_the_store_does_not_have_leaves_its_whole_prompt_to_ner(redactor):
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    doc = templated_call("deleted", system, {"idioma": "pt"}, [], "Oi")
    (call,) = redact(redactor, [doc]).calls
    assert AUTHOR not in call["system_text"]
    with Redactor(mode="placeholder", keys=KEYS, ner=True) as no_store:
        (call,) = redact(no_store, [templated_call("operator", system, {"idioma": "pt"}, [], "Oi")]).calls
    assert AUTHOR not in call["system_text"]


def test_a_call_and_its_twin_under_another_template_are_each_redacted_by_their_own_rules(redactor):
    # the same request bytes recorded with two template versions: one writes the name, one does not
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    kept = templated_call("operator", system, {"idioma": "pt"}, [], "Oi")
    unknown = {**templated_call("deleted", system, {"idioma": "pt"}, [], "Oi"), "trace_id": "twin"}
    for documents in ([kept, unknown], [unknown, kept]):
        first, second = redact(redactor, documents).calls
        for call in (first, second):
            request_system = json.loads(call["request_json"])["system"]
            assert request_system == call["system_text"]
            assert (AUTHOR in request_system) == (call["template_version"] == "operator")


def test_loading_the_ner_model_inside_a_batch_leaves_gc_paused():
    # spaCy's model loading calls gc.enable() (srsly): a redactor that builds its analyzer
    # inside a batch would pay for full collections over the batch's rows
    from pipelines.collector import gc_paused

    with gc_paused():
        TextAnalyzer(DetectorSettings(ner=True))
        assert gc.get_threshold()[0] == 0
