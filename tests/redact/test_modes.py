"""The three modes: placeholders consistent within a trace, encryption that
round-trips, synthetic values that keep their shape and check digits."""

from __future__ import annotations

import copy
import json
import re

import phonenumbers
import pytest

from pipelines.redact import check_digits
from pipelines.redact.encryption import TOKEN, DecryptionError
from pipelines.redact.keys import KeyRing, MissingKey
from pipelines.redact.redactor import Redactor
from pipelines.redact.unredact import unredact_documents, unredact_rows
from tests.redact.conftest import KEYS, reversible_policy, rows_of

EMAIL = "Maria.Souza@gmail.com"
CPF = "529.982.247-25"
CNPJ_ALNUM = "12.ABC.345/01DE-35"  # check digits per the 2026 rule
CARD = "2221 0000 0000 0009"
PHONE = "+55 11 98765-4321"
IBAN = "GB82 WEST 1234 5698 7654 32"


def trace_document(trace_id: str, email: str = EMAIL, when: str = "2026-11-20T10:00:00+00:00") -> dict:
    """One call where the same values appear in a user turn, tool arguments
    (as a dict and as a JSON string), a tool result, a retrieved document and the output."""
    request = {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 512,
        "messages": [
            {"role": "user", "content": f"Sou cliente, email {email.lower()}, CPF {CPF}, cartão {CARD}."},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "lookup",
                        "input": {"email": email, "cpf": 52998224725},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": json.dumps({"customer": {"contact": email, "phone": PHONE, "iban": IBAN}}),
                    }
                ],
            },
        ],
    }
    return {
        "trace_id": trace_id,
        "span_id": f"{trace_id}-1",
        "occurred_at": when,
        "model": {"id": "claude-sonnet-4-5-20250929"},
        "request": request,
        "retrieval": {"doc_ids": ["ticket-9"], "texts": [f"Ticket from {email}: company CNPJ {CNPJ_ALNUM}."]},
        "response": {
            "id": f"msg-{trace_id}",
            "content": [{"type": "text", "text": f"Done, {email} is confirmed; CPF {CPF} checked."}],
            "stop_reason": "end_turn",
        },
        "openai_tool_calls": [{"function": {"name": "lookup", "arguments": json.dumps({"email": email})}}],
    }


def placeholders(text: str, entity: str) -> set[str]:
    return set(re.findall(rf"<{entity}_\d+>", text))


def test_placeholders_are_consistent_within_a_trace(placeholder_redactor):
    calls, spans = rows_of([trace_document("t-a"), trace_document("t-b", email="joao@empresa.com.br")])
    result = placeholder_redactor.redact_rows(calls, spans)
    for row in result.calls:
        blob = json.dumps(row, ensure_ascii=False, default=str)
        # one email per trace, in any case: one placeholder everywhere it appears
        assert placeholders(blob, "EMAIL_ADDRESS") == {"<EMAIL_ADDRESS_1>"}
        assert placeholders(blob, "BR_CPF") == {"<BR_CPF_1>"}
        for column in ("request_json", "output_text", "extra_json"):
            assert "<EMAIL_ADDRESS_1>" in row[column]
        assert "<EMAIL_ADDRESS_1>" in row["retrieval"]["documents"][0]["text"]
        assert row["tool_executions"] is None or "<EMAIL_ADDRESS_1>" in json.dumps(row["tool_executions"])


def test_request_json_and_message_columns_agree(redacted_rows):
    """The same string in request_json and in the structured columns gets the same replacement."""
    for row in redacted_rows.calls:
        request = json.loads(row["request_json"])
        for message, stored in zip(request["messages"], row["messages"], strict=True):
            content = message["content"]
            if isinstance(content, str):
                assert stored["parts"][0]["text"] == content
                continue
            for block, part in zip(content, stored["parts"], strict=True):
                assert json.loads(part["native_json"]) == block
                if block["type"] == "text":
                    assert part["text"] == block["text"]
                if block["type"] == "tool_use":
                    assert json.loads(part["arguments_json"]) == block["input"]


def test_numbering_follows_the_trace_not_the_input_order(placeholder_redactor):
    first = trace_document("t-order", when="2026-11-20T10:00:00+00:00")
    second = trace_document("t-order", email="other@empresa.com.br", when="2026-11-20T10:05:00+00:00")
    second["span_id"] = "t-order-2"
    forward = placeholder_redactor.redact_rows(*rows_of([first, second])).calls
    backward = placeholder_redactor.redact_rows(*rows_of([second, first])).calls[::-1]
    for column in ("request_json", "messages", "output_text", "extra_json", "retrieval"):
        assert [row[column] for row in forward] == [row[column] for row in backward]
    assert "<EMAIL_ADDRESS_1>" in forward[0]["output_text"]
    assert "<EMAIL_ADDRESS_2>" in forward[1]["output_text"]


def test_encrypt_round_trips_rows_and_documents():
    document = trace_document("t-enc")
    calls, spans = rows_of([document])
    with Redactor(reversible_policy(), mode="encrypt", keys=KEYS, ner=False) as redactor:
        result = redactor.redact_rows(calls, spans)
        again = redactor.redact_rows(calls, spans)
        redacted_docs = redactor.redact_documents([document])
    blob = json.dumps(result.calls, default=str)
    assert EMAIL.lower() not in blob.lower() and "52998224725" not in blob and CPF not in blob
    tokens = TOKEN.findall(blob)
    assert tokens and {key_id for _, key_id, _ in tokens} == {"k-test"}
    assert result.calls == again.calls  # deterministic: re-ingesting rewrites nothing
    assert result.audit[0]["encryption_key_id"] == "k-test"

    back_calls, back_spans = unredact_rows(result.calls, result.spans, KEYS, trace_id="t-enc")
    text_columns = ("request_json", "messages", "output_text", "extra_json", "retrieval", "output_messages")
    for column in text_columns:
        assert back_calls[0][column] == calls[0][column], column
    assert unredact_documents(redacted_docs, KEYS) == [document]
    # the integer CPF comes back as an integer
    assert json.loads(back_calls[0]["request_json"])["messages"][1]["content"][0]["input"]["cpf"] == 52998224725


def test_encrypt_tokens_are_bound_to_their_trace_and_key():
    with Redactor(reversible_policy(), mode="encrypt", keys=KEYS, ner=False) as redactor:
        [a, b] = redactor.redact_documents([trace_document("t-1"), trace_document("t-2")])
    token_a = TOKEN.search(json.dumps(a)).group()
    assert token_a not in json.dumps(b)  # the same email, unrelated tokens in two traces
    moved = copy.deepcopy(b)
    moved["response"]["content"][0]["text"] = token_a
    with pytest.raises(DecryptionError) as error:
        unredact_documents([moved], KEYS)
    assert "t-2" in str(error.value) and "@" not in str(error.value)
    other = KeyRing.from_secrets(encryption={"k-test": "some-other-secret-0123456789abcdef"})
    with pytest.raises(DecryptionError):
        unredact_documents([a], other)


def test_encrypt_needs_a_key_and_says_how_to_set_it():
    with pytest.raises(MissingKey, match="TRACELAKE_REDACTION_KEY"):
        Redactor(mode="encrypt", keys=KeyRing(), ner=False)
    keys = KeyRing.from_env({"TRACELAKE_REDACTION_KEY": "s3cret-from-env-0123456789", "TRACELAKE_HASH_KEY": "h"})
    assert keys.current_key_id and keys.current_key_id.startswith("k")
    assert "s3cret" not in repr(keys)


def test_credentials_stay_placeholders_even_in_encrypt_mode():
    document = trace_document("t-cred")
    document["request"]["messages"][0]["content"] += " key sk-ant-api03-" + "x1" * 30
    with Redactor(mode="encrypt", keys=KEYS, ner=False) as redactor:
        [redacted] = redactor.redact_documents([document])
    assert "<CREDENTIAL_1>" in redacted["request"]["messages"][0]["content"]


def synthetic_output(trace_id: str, keys: KeyRing = KEYS) -> dict:
    with Redactor(mode="synthetic", keys=keys, ner=False) as redactor:
        return redactor.redact_documents([trace_document(trace_id)])[0]


def test_synthetic_values_keep_shape_and_check_digits():
    out = synthetic_output("t-syn")
    user = out["request"]["messages"][0]["content"]
    email, cpf, card = re.search(r"email (\S+), CPF (\S+), cartão (.+)\.$", user).groups()
    assert email.endswith(("@example.com", "@example.org", "@example.net")) and email != EMAIL.lower()
    assert re.fullmatch(r"\d{3}\.\d{3}\.\d{3}-\d{2}", cpf) and cpf != CPF and check_digits.is_valid_cpf(cpf)
    assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", card) and card != CARD and check_digits.is_valid_card(card)
    assert card.startswith("2221")  # same scheme: a 2-series Mastercard stays one
    cpf_number = out["request"]["messages"][1]["content"][0]["input"]["cpf"]
    assert isinstance(cpf_number, int) and check_digits.is_valid_cpf(f"{cpf_number:011d}")
    result = json.loads(out["request"]["messages"][2]["content"][0]["content"])["customer"]
    assert check_digits.is_valid_iban(result["iban"]) and result["iban"] != IBAN
    assert result["iban"][:2] == "GB" and len(result["iban"]) == len(IBAN)
    phone = result["phone"]
    assert phone != PHONE and re.sub(r"\d", "9", phone) == re.sub(r"\d", "9", PHONE)
    assert phonenumbers.parse(phone).country_code == 55
    cnpj = re.search(r"CNPJ (\S+)\.", out["retrieval"]["texts"][0]).group(1)
    assert cnpj != CNPJ_ALNUM and check_digits.is_valid_cnpj(cnpj)
    assert re.fullmatch(r"[0-9A-Z]{2}\.[0-9A-Z]{3}\.[0-9A-Z]{3}/[0-9A-Z]{4}-\d{2}", cnpj)


def test_synthetic_values_are_consistent_and_deterministic_for_a_key():
    out = synthetic_output("t-syn")
    user = out["request"]["messages"][0]["content"]
    email = re.search(r"email (\S+),", user).group(1)
    assert out["request"]["messages"][1]["content"][0]["input"]["email"].lower() == email
    assert email in out["response"]["content"][0]["text"].lower()
    assert synthetic_output("t-syn") == out  # same key, same trace: same fakes
    assert synthetic_output("t-other")["request"]["messages"][0]["content"] != user  # not linkable across traces
    other_key = KeyRing.from_secrets(hash_secret="another-hash-key-0123456789abcdef")
    assert synthetic_output("t-syn", other_key)["request"]["messages"][0]["content"] != user
