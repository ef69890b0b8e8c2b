# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""Raw Anthropic logs: request/response pairs as an HTTP hook logs them (the
anthropic SDK's own request bytes and response), and Message Batches files."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pipelines.ingest.objects import SourceObject, ingest_objects
from pipelines.record.canonical import request_sha256
from tests.formats.conftest import ANSWER, SNAPSHOT, SYSTEM, TOOL_ID, TOOLS, client_for, messages_of, normalize
from tests.messages_api import MessagesAPI, text_reply, tool_use_reply, usage


def test_messages_pairs_from_the_sdk(api):
    client = client_for(api)
    lines = []
    history = [{"role": "user", "content": "Weather in Paris?"}]
    for turn in range(2):
        started = datetime.now(UTC)
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, tools=TOOLS, messages=list(history),
            metadata={"user_id": "u_123"}, extra_body={"temperature": 0.2},
        )  # fmt: skip
        message = raw.parse()
        lines.append({
            "request": json.loads(raw.http_request.content), "response": raw.http_response.json(),
            "response_headers": dict(raw.headers), "started_at": started.isoformat(), "ended_at": datetime.now(UTC).isoformat(),
        })  # fmt: skip
        if turn == 0:
            history += [
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": TOOL_ID, "content": "15 C, sunny"}],
                },
            ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    fmt, out = normalize(data, key="proxy/2026/11/30/exchanges.jsonl")
    assert fmt == "anthropic_messages"
    first, second = out.calls
    assert json.loads(first["request_json"]) == api.requests[0].body
    assert first["request_sha256"] == request_sha256(api.requests[0].body)
    assert first["params"]["temperature"] == 0.2 and first["user_id"] == "u_123"
    assert first["system_text"] == SYSTEM and first["tool_definitions"][0]["name"] == "get_weather"
    assert (first["request_model"], first["response_model"]) == ("claude-sonnet-4-5", SNAPSHOT)
    assert (first["finish_reason"], first["stop_reason_native"]) == ("tool_call", "tool_use")
    assert first["usage"] == {
        "input_tokens": 455, "output_tokens": 52, "cache_read_input_tokens": 0,
        "cache_write_input_tokens": 1024, "total_tokens": 1531, "cost_usd": None,
    }  # fmt: skip
    assert first["provider_request_id"].startswith("req_01Test")
    assert (first["trace_id"], first["span_id"], first["response_id"]) == ("msg_turn1", "msg_turn1", "msg_turn1")
    assert messages_of(second)[2] == ("user", [("tool_result", "15 C, sunny", TOOL_ID, None)])
    assert second["output_text"] == ANSWER and second["context_complete"]


def test_thread_continuation_is_not_context_complete():
    line = {
        "request": {"model": "claude-sonnet-4-5", "max_tokens": 256, "thread": {"type": "continue", "previous_message_id": "msg_1"},
                    "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_ID, "content": "15 C"}]}]},
        "response": text_reply("ok", id="msg_2"), "started_at": "2026-11-30T09:00:00Z",
    }  # fmt: skip
    _, out = normalize(json.dumps(line).encode(), key="proxy/2026/11/30/x.json")
    (call,) = out.calls
    assert call["previous_response_id"] == "msg_1" and call["context_complete"] is False


def test_batch_requests_and_results_are_one_call():
    params = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 256, "system": SYSTEM, "tools": TOOLS,
              "messages": [{"role": "user", "content": "Weather in Paris?"}], "metadata": {"user_id": "u_123"}}  # fmt: skip
    requests = [{"custom_id": "ft-1", "params": params}, {"custom_id": "ft-2", "params": params}]
    with MessagesAPI() as _:  # results in the real message shape
        ok = tool_use_reply(
            "get_weather",
            {"city": "Paris"},
            tool_id="toolu_01Ab",
            id="msg_b1",
            usage_=usage(455, 41, service_tier="batch"),
        )
    results = [
        {"custom_id": "ft-2", "result": {"type": "errored", "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "x"}}}},
        {"custom_id": "ft-1", "result": {"type": "succeeded", "message": ok}},
        {"custom_id": "ft-3", "result": {"type": "expired"}},
    ]  # fmt: skip
    now = datetime.now(UTC)
    objects = [
        SourceObject(k, k, "e", 1, now, "\n".join(json.dumps(x) for x in rows).encode())
        for k, rows in (("batches/2026/11/30/requests.jsonl", requests), ("batches/2026/11/30/results.jsonl", results))
    ]
    batch = ingest_objects(objects, now.date(), "run", now)
    calls = {c["trace_id"]: c for c in batch.calls}
    assert set(calls) == {"ft-1", "ft-2", "ft-3"}
    one = calls["ft-1"]
    assert one["source_format"] == "anthropic_batch" and one["system_text"] == SYSTEM
    assert one["request_model"] == SNAPSHOT and one["response_id"] == "msg_b1" and one["status"] == "ok"
    assert one["output_messages"][0]["parts"][0]["tool_call_id"] == "toolu_01Ab" and one["finish_reason"] == "tool_call"
    assert one["usage"]["output_tokens"] == 41 and one["user_id"] == "u_123"
    assert one["occurred_at"] == datetime(2026, 11, 30, tzinfo=UTC)
    assert (calls["ft-2"]["status"], calls["ft-2"]["error_type"]) == ("error", "invalid_request_error")
    assert calls["ft-3"]["status"] == "expired"
