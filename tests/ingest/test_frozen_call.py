"""Frozen-call JSON v1 -> a calls row, field by field; the published JSON Schema."""

import json
from datetime import UTC, date, datetime
from pathlib import Path

import jsonschema

from pipelines.demo import day_objects
from pipelines.demo.people import population
from pipelines.formats import frozen_call
from pipelines.formats.base import SourceRef
from pipelines.record.canonical import request_sha256

SOURCE = SourceRef(uri="s3://raw/2026/11/29/a.jsonl", key="2026/11/29/a.jsonl", etag="e1")
SCHEMA_FILE = Path(frozen_call.__file__).with_name("frozen_call_v1.schema.json")

REQUEST = {
    "model": "claude-sonnet-4-5-20250929",
    "system": [{"type": "text", "text": "You are Acme's assistant.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "Where is order A-1?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": "A-1"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "delivered"}]}
            ],
        },
    ],
    "tools": [
        {
            "name": "lookup_order",
            "description": "Find an order.",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        }
    ],
    "max_tokens": 1024,
    "temperature": 0.3,
    "stop_sequences": ["</answer>"],
    "tool_choice": {"type": "auto"},
}

DOC = {
    "format": "tracelake.frozen_call",
    "version": 1,
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "span_id": "00f067aa0ba902b7",
    "session_id": "sess-9",
    "user_id": "u-42",
    "captured_at": "2026-11-29T14:32:03.100Z",
    "occurred_at": "2026-11-29T14:32:01.000Z",
    "ended_at": "2026-11-29T14:32:03.000Z",
    "service": "support.answer",
    "environment": "prod",
    "service_sha": "9f2c1e7",
    "tags": ["beta"],
    "segment": {"user_tier": "vip", "language": "en"},
    "prompt": {
        "template_id": "support-answer",
        "version": "v3",
        "label": "production",
        "variables": {"company": "Acme"},
    },
    "model": {
        "id": "claude-sonnet-4-5-20250929",
        "alias": "support-default",
        "resolved_snapshot": "claude-sonnet-4-5-20250929",
        "endpoint": "https://api.anthropic.com/v1/messages",
    },
    "sampling": {"temperature": 0.3, "max_tokens": 1024, "seed": 11},
    "request": REQUEST,
    "rendered_request_sha256": request_sha256(REQUEST),
    "rendered_request_path": "s3://requests/4bf9.json",
    "block_tokens": {"system": 7},
    "retrieval": {
        "embedding_model": "voyage-3-lite",
        "index_snapshot": "kb-2026-10-01",
        "query": "order A-1",
        "doc_ids": ["kb-1", "kb-2"],
        "scores": [0.9, 0.8],
        "texts": ["Orders ship in 3 days.", None],
    },
    "response": {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "It was delivered."}],
        "stop_reason": "max_tokens",
        "usage": {
            "input_tokens": 40,
            "output_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 3,
        },
    },
    "latency_ms": 2000.0,
    "cost_usd": 0.0021,
    "feedback": {"value": "down", "comment": "wrong order", "at": "2026-11-29T15:00:00Z"},
    "eval_score": 2.5,
    "escalated": True,
    "guardrail_hit": False,
    "app_build": "2026.11.3",
}


def test_every_field_lands_in_its_column():
    out = frozen_call.normalize(json.dumps(DOC).encode(), SOURCE)
    assert out.problems == [] and out.records_read == 1
    (call,) = out.calls
    assert call["trace_id"] == DOC["trace_id"] and call["span_id"] == "00f067aa0ba902b7"
    assert call["session_id"] == "sess-9" and call["user_id"] == "u-42"
    assert call["occurred_at"] == datetime(2026, 11, 29, 14, 32, 1, tzinfo=UTC)
    assert call["occurred_date"] == date(2026, 11, 29) and call["latency_ms"] == 2000.0
    assert (call["service"], call["environment"], call["release"]) == ("support.answer", "prod", "9f2c1e7")
    assert call["segment"] == {"user_tier": "vip", "language": "en"}
    assert (call["template_id"], call["template_version"], call["template_label"]) == (
        "support-answer",
        "v3",
        "production",
    )
    assert json.loads(call["template_variables_json"]) == {"company": "Acme"}
    assert call["request_model"] == "claude-sonnet-4-5-20250929" and call["model_alias"] == "support-default"
    assert call["response_model"] == "claude-sonnet-4-5-20250929"
    assert call["params"] == {
        "max_tokens": 1024,
        "temperature": 0.3,
        "top_p": None,
        "top_k": None,
        "seed": 11,
        "stop_sequences": ["</answer>"],
    }
    assert json.loads(call["params_extra_json"]) == {"tool_choice": {"type": "auto"}}
    assert call["system_text"] == "You are Acme's assistant."
    roles = [m["role"] for m in call["messages"]]
    assert roles == ["user", "assistant", "user"]
    tool_call = call["messages"][1]["parts"][0]
    assert (tool_call["type"], tool_call["tool_call_id"], tool_call["tool_name"]) == (
        "tool_call",
        "toolu_1",
        "lookup_order",
    )
    assert json.loads(tool_call["arguments_json"]) == {"order_id": "A-1"}
    result = call["messages"][2]["parts"][0]
    assert (result["type"], result["tool_call_id"], result["text"]) == ("tool_result", "toolu_1", "delivered")
    assert call["tool_definitions"][0]["name"] == "lookup_order"
    assert json.loads(call["tool_definitions"][0]["schema_json"])["properties"] == {"order_id": {"type": "string"}}
    assert call["output_text"] == "It was delivered."
    assert (call["finish_reason"], call["stop_reason_native"]) == ("length", "max_tokens")
    assert call["response_id"] == "msg_01"
    assert call["usage"] == {
        "input_tokens": 40,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_write_input_tokens": 3,
        "total_tokens": 148,
        "cost_usd": 0.0021,
    }
    docs = call["retrieval"]["documents"]
    assert [d["doc_id"] for d in docs] == ["kb-1", "kb-2"] and docs[1]["text"] is None
    assert call["retrieval"]["index_snapshot"] == "kb-2026-10-01"
    assert call["feedback"][0]["value_string"] == "down" and call["feedback"][0]["comment"] == "wrong order"
    assert call["eval_score"] == 2.5 and call["escalated"] is True and call["status"] == "ok"
    assert call["rendered_request_sha256"] == call["request_sha256"] and call["request_hash_matches"] is True
    assert call["rendered_request_uri"] == "s3://requests/4bf9.json"
    blocks = {b["block"]: b for b in call["block_hashes"]}
    assert blocks["system"]["tokens"] == 7 and "document:kb-1" in blocks and "document:kb-2" not in blocks
    assert json.loads(call["extra_json"]) == {"app_build": "2026.11.3"}
    # the retrieved text of kb-2 was not captured, and Anthropic has no seed... but this one recorded it
    assert call["capture_missing"] == ["intermediate_observations"]
    assert call["context_complete"] is True
    (span,) = out.spans
    assert span["kind"] == "llm_call" and span["call_id"] == call["call_id"]


def test_same_document_gets_the_same_call_id_and_content_hash():
    a = frozen_call.normalize(json.dumps(DOC).encode(), SOURCE).calls[0]
    b = frozen_call.normalize(json.dumps(DOC).encode(), SourceRef(SOURCE.uri, SOURCE.key, "e2")).calls[0]
    assert a["call_id"] == b["call_id"] and a["record_sha256"] == b["record_sha256"]


def test_a_mismatched_recorded_hash_is_kept_and_flagged():
    doc = {**DOC, "rendered_request_sha256": "0" * 64}
    call = frozen_call.normalize(json.dumps(doc).encode(), SOURCE).calls[0]
    assert call["request_hash_matches"] is False and call["rendered_request_sha256"] == "0" * 64


def test_server_side_continuation_is_not_context_complete():
    doc = {**DOC, "previous_response_id": "msg_00"}
    call = frozen_call.normalize(json.dumps(doc).encode(), SOURCE).calls[0]
    assert call["context_complete"] is False


def test_published_schema_is_current_and_accepts_the_demo():
    assert json.loads(SCHEMA_FILE.read_text()) == frozen_call.json_schema(), (
        "regenerate with: tracelake frozen-call-schema > pipelines/formats/frozen_call_v1.schema.json"
    )
    validator = jsonschema.Draft202012Validator(frozen_call.json_schema())
    validator.validate(DOC)
    objects, _, _ = day_objects(date(2026, 11, 29), 200, 3, population(3, size=50))
    frozen = [key for key in objects if "/agent/" not in key]
    assert frozen
    for key in frozen:
        data = objects[key]
        for line in data.splitlines() if key.endswith((".jsonl.gz", ".jsonl.zst")) else [data]:
            validator.validate(json.loads(line))
    bad = {**DOC, "model": {"id": 5}}
    assert not validator.is_valid(bad)
