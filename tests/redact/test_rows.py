"""Redacting canonical rows: schema kept, hashes taken from the raw request
first, spans consistent with calls, an audit row per call, nothing raw in
errors or metadata."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from pipelines.record import canonical
from pipelines.record.rows import BOOKKEEPING
from pipelines.redact.block_hashes import HMAC_SHA256, SHA256, block_sha256
from pipelines.redact.keys import KeyRing
from pipelines.redact.policy import load_policy
from pipelines.redact.redactor import HASH_MISMATCH_FLAG, REDACTED_FLAG, Redactor
from pipelines.resources.warehouse import to_arrow
from tests.redact.conftest import KEYS, event_rows, rows_of
from tests.redact.test_modes import EMAIL, trace_document

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


def test_rows_cast_to_the_declared_schemas(redacted_rows):
    assert to_arrow("calls", redacted_rows.calls).num_rows == len(redacted_rows.calls)
    assert to_arrow("spans", redacted_rows.spans).num_rows == len(redacted_rows.spans)
    assert to_arrow("redaction_audit", redacted_rows.audit).num_rows == len(redacted_rows.audit)


def test_block_hashes_are_keyed_where_blocks_may_hold_pii(corpus_rows, redacted_rows):
    raw = corpus_rows[0][1]
    row = redacted_rows.calls[1]
    blocks = canonical.request_blocks(json.loads(raw["request_json"]))
    doc = raw["retrieval"]["documents"][0]
    blocks[f"document:{doc['doc_id']}"] = canonical.document_block(doc["doc_id"], doc["text"])
    stored = {r["block"]: r for r in row["block_hashes"]}
    assert stored.keys() == blocks.keys()
    for name, block in blocks.items():
        keyed = name in ("system", "metadata") or name.startswith(("messages[", "document:"))
        assert stored[name]["algorithm"] == (HMAC_SHA256 if keyed else SHA256), name
        # recomputable from the raw block, e.g. by the rot check on a re-rendered one
        assert stored[name]["sha256"] == block_sha256(block, stored[name]["algorithm"], KEYS)
        if keyed:
            assert stored[name]["sha256"] != canonical.sha256_hex(canonical.canonical_json(block))
    expected = hmac.new(KEYS.block_hash_key(), canonical.canonical_json(blocks["system"]).encode(), hashlib.sha256)
    assert stored["system"]["sha256"] == expected.hexdigest()
    # the request hash stays the raw request's, and matches it
    assert row["request_sha256"] == canonical.request_sha256(json.loads(raw["request_json"]))


def test_another_hash_key_gives_other_keyed_hashes(corpus_rows):
    calls, _ = corpus_rows
    other = KeyRing.from_secrets(hash_secret="a-different-hash-key-0123456789")
    with Redactor(mode="placeholder", keys=other, ner=False) as redactor:
        row = redactor.redact_rows(calls[:1]).calls[0]
    with Redactor(mode="placeholder", keys=KEYS, ner=False) as redactor:
        mine = redactor.redact_rows(calls[:1]).calls[0]
    theirs = {r["block"]: r["sha256"] for r in row["block_hashes"]}
    ours = {r["block"]: r["sha256"] for r in mine["block_hashes"]}
    assert theirs["messages[0]"] != ours["messages[0]"] and theirs["model"] == ours["model"]


def test_public_documents_keep_their_text_and_a_plain_hash(corpus_rows):
    policy = load_policy().model_copy(update={"public_documents": ("ticket-*",)})
    calls, _ = corpus_rows
    with Redactor(policy, mode="placeholder", keys=KEYS, ner=False) as redactor:
        row = redactor.redact_rows(calls[:2]).calls[1]
    assert row["retrieval"]["documents"][0]["text"] == calls[1]["retrieval"]["documents"][0]["text"]
    doc_hash = next(r for r in row["block_hashes"] if r["block"].startswith("document:"))
    assert doc_hash["algorithm"] == SHA256


def test_a_request_hash_mismatch_is_flagged(placeholder_redactor):
    document = trace_document("t-hash")
    document["rendered_request_sha256"] = "0" * 64  # the app logged other bytes than it sent
    matching = trace_document("t-hash-ok")
    matching["rendered_request_sha256"] = canonical.request_sha256(matching["request"])
    result = placeholder_redactor.redact_rows(*rows_of([document, matching]), now=NOW)
    bad, good = result.calls
    assert bad["request_hash_matches"] is False and HASH_MISMATCH_FLAG in bad["flags"]
    assert good["request_hash_matches"] is True and HASH_MISMATCH_FLAG not in good["flags"]
    assert result.audit[0]["flags"] == [HASH_MISMATCH_FLAG] and result.audit[1]["flags"] == []
    assert REDACTED_FLAG in bad["flags"]


def test_record_hash_describes_the_stored_row(redacted_rows):
    for row in [*redacted_rows.calls, *redacted_rows.spans]:
        assert row["record_sha256"] == canonical.record_sha256(row, BOOKKEEPING)


def test_audit_rows_count_without_values(corpus, corpus_rows, redacted_rows):
    calls, spans = corpus_rows
    audit = {row["call_id"]: row for row in redacted_rows.audit}
    assert set(audit) >= {c["call_id"] for c in calls}
    first = audit[calls[0]["call_id"]]
    policy = load_policy()
    assert first["mode"] == "placeholder" and first["policy_version"] == policy.version
    assert first["policy_sha256"] == policy.sha256 and first["detector_versions"]["presidio-analyzer"] == "2.2.366"
    assert first["detector_versions"]["ner"] == "off" and first["hash_key_id"] == KEYS.hash_key_id
    assert sum(first["entity_counts"].values()) >= 1 and first["replacements"] >= sum(first["entity_counts"].values())
    assert "request_json.messages.content" in first["fields"]
    blob = json.dumps(redacted_rows.audit, default=str)
    assert not [p for p in corpus.planted if str(p.value) in blob]


def test_spans_and_calls_of_a_trace_share_placeholders(placeholder_redactor):
    request = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 64,
               "messages": [{"role": "user", "content": f"refund for {EMAIL}"}]}  # fmt: skip
    events = [
        {"event_id": "e1", "session_id": "s1", "trace_id": "t-agent", "step_index": 1,
         "timestamp": "2026-11-20T10:00:01Z", "event_type": "llm.call",
         "payload": {"model": {"id": "claude-sonnet-4-5-20250929"}, "request": request,
                     "response": {"id": "m1", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}}},
        {"event_id": "e2", "session_id": "s1", "trace_id": "t-agent", "step_index": 2,
         "timestamp": "2026-11-20T10:00:02Z", "event_type": "tool.invoke",
         "payload": {"tool_call_id": "toolu_1", "name": "refund", "arguments": {"customer": EMAIL.upper()},
                     "result": {"status": "refunded", "phone": "+55 11 98765-4321"}}},
        {"event_id": "e3", "session_id": "s1", "trace_id": "t-agent", "step_index": 3,
         "timestamp": "2026-11-20T10:00:03Z", "event_type": "agent.think",
         "payload": {"text": f"Refunded {EMAIL}; tell them by phone +55 11 98765-4321"}},
    ]  # fmt: skip
    result = placeholder_redactor.redact_rows(*event_rows(events), now=NOW)
    [call] = result.calls
    assert "<EMAIL_ADDRESS_1>" in call["request_json"]
    tool, think = (s for s in result.spans if s["kind"] in ("tool", "think"))
    assert "<EMAIL_ADDRESS_1>" in tool["attributes_json"] and "<PHONE_NUMBER_1>" in tool["attributes_json"]
    assert "<EMAIL_ADDRESS_1>" in think["attributes_json"] and "<PHONE_NUMBER_1>" in think["attributes_json"]
    span_audit = [a for a in result.audit if a["source_table"] == "spans"]
    assert {a["span_key"] for a in span_audit} == {tool["span_key"], think["span_key"]}


def test_redaction_is_deterministic(corpus_rows, redacted_rows):
    calls, spans = corpus_rows
    with Redactor(mode="placeholder", keys=KEYS, ner=False) as fresh:
        again = fresh.redact_rows(calls, spans)
    assert again.calls == redacted_rows.calls and again.spans == redacted_rows.spans


def test_input_rows_are_not_mutated(corpus_rows, placeholder_redactor):
    calls, spans = corpus_rows
    before = json.dumps([calls[:5], spans[:5]], default=str, sort_keys=True)
    placeholder_redactor.redact_rows(calls[:5], spans[:5])
    assert json.dumps([calls[:5], spans[:5]], default=str, sort_keys=True) == before


def test_broken_json_in_a_json_column_is_redacted_as_text(placeholder_redactor):
    calls, spans = rows_of([trace_document("t-broken")])
    calls[0]["extra_json"] = '{"note": "truncated capture, reach me at ' + EMAIL
    row = placeholder_redactor.redact_rows(calls, spans).calls[0]
    assert EMAIL not in row["extra_json"] and "<EMAIL_ADDRESS_1>" in row["extra_json"]


def test_large_fields_are_chunked_without_losing_entities_on_boundaries():
    policy = load_policy().model_copy(update={"large_field_chars": 1_000})
    filler = "lorem ipsum dolor sit amet " * 30
    emails = [f"person{i}@empresa.com.br" for i in range(40)]
    text = " ".join(filler[: 100 + 37 * i] + " " + e for i, e in enumerate(emails))
    assert len(text) > 20_000
    with Redactor(policy, mode="placeholder", keys=KEYS, ner=False) as redactor:
        [out] = redactor.redact_documents([{"trace_id": "t-large", "content": text}])
    assert not [e for e in emails if e in out["content"]]
    assert out["content"].count("<EMAIL_ADDRESS_") == len(emails)


def test_errors_and_stats_never_carry_raw_text(placeholder_redactor, monkeypatch):
    calls, spans = rows_of([trace_document("t-err")])
    result = placeholder_redactor.redact_rows(calls, spans)
    assert all(isinstance(v, int) for v in result.stats.values())
    analyzer = placeholder_redactor.analyzer

    def boom(text, **kwargs):
        raise RuntimeError(f"failed on {text}")

    monkeypatch.setattr(analyzer.engine, "analyze", boom)
    fresh = trace_document("t-err-2", email="someone.else@provedor.com.br")
    with pytest.raises(Exception) as error:
        placeholder_redactor.redact_rows(*rows_of([fresh]))
    assert "someone.else" not in str(error.value) and "provedor" not in repr(error.value)


def test_presidio_log_records_carry_no_text(caplog):
    import logging

    from pipelines.redact import analyzer  # noqa: F401  (installs the filter)

    with caplog.at_level(logging.WARNING, logger="presidio-analyzer"):
        logging.getLogger("presidio-analyzer").error("Failed to validate text %s", "GB82 WEST 1234 5698 7654 32")
    assert caplog.records and all("GB82" not in r.getMessage() for r in caplog.records)


def test_audit_field_paths_never_carry_keys_that_are_data(placeholder_redactor):
    document = {"trace_id": "t-keys", "balances": {"maria@empresa.com.br": f"owner {EMAIL}"}}
    calls, spans = rows_of([trace_document("t-keys")])
    calls[0]["extra_json"] = json.dumps(document)
    audit = placeholder_redactor.redact_rows(calls, spans).audit[0]
    assert any(f.startswith("extra_json.balances.*") for f in audit["fields"])
    assert "maria" not in json.dumps(audit, default=str)


def test_numbers_in_another_scripts_digits_are_replaced_in_every_column(placeholder_redactor):
    """A CPF and a card typed in fullwidth digits (a CJK input method) in a user turn and
    in tool arguments: gone from the stored row and its request, and the scan finds none."""
    from pipelines.redact.residual import scan
    from pipelines.resources.warehouse import to_arrow
    from tests.redact.test_modes import CARD, CPF

    fullwidth = str.maketrans("0123456789", "０１２３４５６７８９")
    cpf, card = CPF.translate(fullwidth), CARD.translate(fullwidth)
    document = trace_document("wide-digits")
    request = document["request"]
    request["messages"][0]["content"] = f"Meu CPF é {cpf} e o cartão {card}."
    request["messages"][1]["content"][0]["input"] = {"documento": cpf}
    calls, spans = rows_of([document])
    (call,) = placeholder_redactor.redact_rows(calls, spans).calls
    stored = json.dumps(call, ensure_ascii=False, default=str)
    assert cpf not in stored and card not in stored
    assert "<BR_CPF_1>" in call["messages"][0]["parts"][0]["text"]
    assert "<CREDIT_CARD_1>" in json.loads(call["request_json"])["messages"][0]["content"]
    policy = load_policy()
    assert scan(to_arrow("calls", [call]), "calls", policy) == {}
    # and the scan, the second line, finds such a number where one is left
    left = {**call, "system_text": f"documento {cpf}"}
    assert scan(to_arrow("calls", [left]), "calls", policy)[0]["cpf"] == 1
