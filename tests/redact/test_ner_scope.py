"""Where NER reads (issue 13): user and assistant turns, tool arguments and
results, template variables and documents, and system prompts only when no
template is recorded; each distinct line once per batch. A name NER finds in
a template variable or a document is still replaced where the rendered
system prompt quotes it, and the regex recognizers still read everything."""

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


def templated_call(trace: str, system: str, variables: dict, documents: list[str], user: str) -> dict:
    return {
        "trace_id": trace,
        "occurred_at": "2026-11-20T10:00:00+00:00",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "prompt": {"template_id": "support-answer", "version": "3", "variables": variables},
        "request": {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 256,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        },
        "retrieval": {"query": "pedido", "doc_ids": [f"kb-{i}" for i in range(len(documents))], "texts": documents},
        "response": {"id": f"msg-{trace}", "content": [{"type": "text", "text": "Vou verificar."}]},
    }


@pytest.fixture(scope="module")
def redactor():
    with Redactor(mode="placeholder", keys=KEYS, ner=True) as redactor:
        yield redactor


def redact(redactor: Redactor, documents: list[dict]):
    calls, spans = rows_of(documents)
    return redactor.redact_rows(calls, spans)


def test_a_name_in_a_template_variable_is_replaced_in_both_places(redactor):
    # the name is nowhere else in the trace: only the variable (read by NER) and the rendered prompt (not read)
    system = f"Você é o assistente {BRAND}. Atenda a cliente {CUSTOMER} com cordialidade. CPF em cadastro: {CPF}."
    doc = templated_call("variable", system, {"cliente": CUSTOMER}, [], "Oi, meu pedido não chegou")
    (call,) = redact(redactor, [doc]).calls
    replaced = json.loads(call["template_variables_json"])["cliente"]
    assert replaced.startswith("<PERSON_") and CUSTOMER not in call["template_variables_json"]
    assert CUSTOMER not in call["system_text"] and f"cliente {replaced} com" in call["system_text"]
    request_system = json.loads(call["request_json"])["system"]
    assert request_system == call["system_text"]
    assert BRAND in call["system_text"]  # operator text: NER did not read it
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


def test_a_templated_system_prompt_is_not_read_by_ner(redactor):
    # a name only in the rendered prompt of a recorded template is operator text (not a variable's value)
    system = f"Você é o assistente {BRAND}. Seu supervisor é {AUTHOR}."
    doc = templated_call("operator", system, {"idioma": "pt"}, [], "Oi")
    (call,) = redact(redactor, [doc]).calls
    assert AUTHOR in call["system_text"] and BRAND in call["system_text"]


def test_loading_the_ner_model_inside_a_batch_leaves_gc_paused():
    # spaCy's model loading calls gc.enable() (srsly): a caller that builds its
    # analyzer inside a batch would pay for full collections over the batch's rows
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        TextAnalyzer(DetectorSettings(ner=True))
        assert not gc.isenabled()
    finally:
        if was_enabled:
            gc.enable()
