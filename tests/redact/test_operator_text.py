"""Operator-written text is not mistaken for PII (issue 9): a brand in a system
prompt rendered from a template the store has (in the template's own text) or
in a tool description survives,
while a customer's name in a template variable is still found, there and in
the rendered prompt; without a template, the allow-list keeps the brand."""

from __future__ import annotations

import json

from pipelines.redact import nlp
from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import Redactor
from tests.redact.conftest import KEYS, rows_of

BRAND = "Loja Aurora"
CUSTOMER = "Maria Eduarda Carvalho"
SYSTEM = f"Você é o assistente {BRAND}. Atenda a cliente {CUSTOMER} com cordialidade."
# the store's template that SYSTEM was rendered from
TEMPLATE = f"Você é o assistente {BRAND}. Atenda a cliente {{{{ cliente }}}} com cordialidade."
TOOL = {
    "name": "consultar_pedido",
    "description": f"Consulta um pedido da {BRAND} pelo número",
    "input_schema": {"type": "object", "properties": {"numero": {"type": "string"}}},
}


def document(templated: bool) -> dict:
    doc = {
        "trace_id": f"operator-{templated}",
        "occurred_at": "2026-11-20T10:00:00+00:00",
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 256,
            "system": SYSTEM,
            "tools": [TOOL],
            "messages": [{"role": "user", "content": f"Oi, aqui é a {CUSTOMER}, meu pedido não chegou"}],
        },
        "response": {"id": f"msg-{templated}", "content": [{"type": "text", "text": "Vou verificar."}]},
    }
    if templated:
        doc["prompt"] = {"template_id": "support-answer", "version": "3", "variables": {"cliente": CUSTOMER}}
    return doc


def redact(documents: list[dict], policy=None) -> list[dict]:
    calls, spans = rows_of(documents)

    def templates(template_id: str, version: str) -> str | None:
        return TEMPLATE if (template_id, version) == ("support-answer", "3") else None

    with Redactor(policy or load_policy(), mode="placeholder", keys=KEYS, ner=True, templates=templates) as redactor:
        return redactor.redact_rows(calls, spans).calls


def test_ner_is_installed():
    assert nlp.ner_model_version() is not None  # the tests below need the NER model (make setup installs it)


def test_a_templated_system_prompt_keeps_the_brand_and_loses_the_customer():
    (call,) = redact([document(templated=True)])
    assert BRAND in call["system_text"]
    assert CUSTOMER not in call["system_text"]  # the variable's value, found there and propagated
    assert CUSTOMER not in call["template_variables_json"]
    assert json.loads(call["template_variables_json"])["cliente"].startswith("<PERSON_")
    request = json.loads(call["request_json"])
    assert BRAND in request["system"] and CUSTOMER not in json.dumps(request, ensure_ascii=False)


def test_a_name_inside_a_template_variable_is_found_with_no_other_mention():
    doc = document(templated=True)
    doc["request"]["system"] = f"Você é o assistente {BRAND}."
    doc["request"]["messages"][0]["content"] = "Oi, meu pedido não chegou"
    (call,) = redact([doc])
    assert CUSTOMER not in call["template_variables_json"]
    assert BRAND in call["system_text"]


def test_tool_descriptions_are_operator_text():
    (call,) = redact([document(templated=True)])
    (tool,) = call["tool_definitions"]
    assert tool["description"] == TOOL["description"]
    assert BRAND in json.dumps(json.loads(call["request_json"])["tools"], ensure_ascii=False)
    assert CUSTOMER not in call["messages"][0]["parts"][0]["text"]


def test_without_a_template_the_allow_list_keeps_the_brand():
    default = redact([document(templated=False)])[0]
    assert BRAND not in default["system_text"]  # NER reads an untemplated system prompt: the brand looks like a name
    policy = load_policy()
    allowing = policy.model_copy(update={"allow_list": (*policy.allow_list, BRAND)})
    (call,) = redact([document(templated=False)], allowing)
    assert BRAND in call["system_text"] and CUSTOMER not in call["system_text"]
    assert CUSTOMER not in call["messages"][0]["parts"][0]["text"]
    assert call["tool_definitions"][0]["description"] == TOOL["description"]
