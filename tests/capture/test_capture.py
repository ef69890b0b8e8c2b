# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""The capture helper around a real anthropic client talking to the local Messages API."""

from __future__ import annotations

import asyncio
import json
import logging

import anthropic
import pytest

from pipelines.capture import LocalFolderSink, capture
from pipelines.formats import SourceRef, normalize_object
from pipelines.record.canonical import request_sha256
from tests.messages_api import ErrorReply, MessagesAPI, text_reply, tool_use_reply, usage

SYSTEM = "You are a weather bot."
INGREDIENTS = {
    "template_id": "weather-system", "template_version": "3", "variables": {"city": "Paris"},
    "retrieval": {"index_snapshot": "kb-v2026-11-29", "query": "weather Paris", "doc_ids": ["kb-17#3"],
                  "scores": [0.83], "texts": ["Paris forecasts come from Meteo-France."]},
    "session_id": "sess-42", "trace_id": "trace-1",
}  # fmt: skip
REPLY = tool_use_reply("get_weather", {"city": "Paris"}, text="Let me check.", tool_id="toolu_1", id="msg_c1",
                       usage_=usage(455, 52, cache_read=0, cache_write=1024))  # fmt: skip


def _records(root) -> list[dict]:
    files = sorted(root.rglob("*.json"))
    return [json.loads(f.read_text()) for f in files]


def _create(client, **kwargs):
    return client.messages.create(
        model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM, metadata={"user_id": "u_123"},
        messages=[{"role": "user", "content": "Weather in Paris?"}], extra_body={"temperature": 0.2},
        tracelake=INGREDIENTS, **kwargs,
    )  # fmt: skip


def test_sync_call_is_frozen_and_rehashes(tmp_path):
    with MessagesAPI([REPLY]) as api:
        raw_client = anthropic.Anthropic(base_url=api.url, api_key="t", max_retries=0, open_telemetry=False)
        client = capture(raw_client, LocalFolderSink(tmp_path), service="weather-bot", environment="prod")
        reply = _create(client)
        assert reply.id == "msg_c1" and reply.content[1].input == {"city": "Paris"}
        assert client.flush(5)
        sent = api.requests[0].body
    (doc,) = _records(tmp_path)
    assert list(tmp_path.glob("????/??/??/msg_c1.json")), "keys follow the YYYY/MM/DD layout"
    assert doc["request"] == sent and sent["temperature"] == 0.2
    assert doc["rendered_request_sha256"] == request_sha256(sent)
    assert doc["prompt"] == {
        "template_id": "weather-system",
        "version": "3",
        "label": None,
        "variables": {"city": "Paris"},
    }
    assert doc["model"]["resolved_snapshot"] == "claude-sonnet-4-5-20250929" and doc["provider_request_id"].startswith(
        "req_"
    )

    fmt, out = normalize_object(json.dumps(doc).encode(), SourceRef("mem://x.json", "x.json", "e"))
    assert fmt == "frozen_call" and not out.problems
    (call,) = out.calls
    assert call["request_hash_matches"] is True, "a captured call re-hashes to its recorded hash"
    assert (call["template_id"], call["template_version"]) == ("weather-system", "3")
    assert call["retrieval"]["documents"][0]["text"].startswith("Paris")
    assert (call["response_id"], call["finish_reason"], call["stop_reason_native"]) == (
        "msg_c1",
        "tool_call",
        "tool_use",
    )
    assert call["usage"]["cache_write_input_tokens"] == 1024 and call["params"]["temperature"] == 0.2
    assert (call["session_id"], call["user_id"], call["service"], call["trace_id"]) == (
        "sess-42",
        "u_123",
        "weather-bot",
        "trace-1",
    )


def test_streaming_sync_and_async(tmp_path):
    async def run_async(url: str) -> list:
        raw = anthropic.AsyncAnthropic(base_url=url, api_key="t", max_retries=0, open_telemetry=False)
        client = capture(raw, LocalFolderSink(tmp_path / "async"))
        stream = await _create(client, stream=True)
        events = [e.type async for e in stream]
        plain = await _create(client)
        assert plain.id == "msg_c3"
        assert client.flush(5)
        return events

    with MessagesAPI([REPLY, text_reply("It is 15 C.", id="msg_c2"), REPLY, text_reply("x", id="msg_c3")]) as api:
        raw = anthropic.Anthropic(base_url=api.url, api_key="t", max_retries=0, open_telemetry=False)
        client = capture(raw, LocalFolderSink(tmp_path / "sync"))
        events = [e.type for e in _create(client, stream=True)]
        assert events[0] == "message_start" and events[-1] == "message_stop"
        _create(client)
        assert client.flush(5)
        async_events = asyncio.run(run_async(api.url))
        assert async_events == events
    for folder in ("sync", "async"):
        docs = sorted(_records(tmp_path / folder), key=lambda d: d["occurred_at"])
        streamed = docs[0]
        assert streamed["request"]["stream"] is True
        assert streamed["response"]["content"][1] == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "get_weather",
            "input": {"city": "Paris"},
        }
        assert streamed["response"]["stop_reason"] == "tool_use" and streamed["usage"]["output_tokens"] == 52
        assert streamed["first_token_at"] >= streamed["occurred_at"]
        assert streamed["rendered_request_sha256"] == request_sha256(streamed["request"])


class BrokenSink:
    def write(self, key: str, data: bytes) -> None:
        raise ConnectionError("bucket unreachable")


def test_storage_failure_never_breaks_the_call(caplog):
    caplog.set_level(logging.WARNING, logger="tracelake.capture")
    with MessagesAPI([REPLY, ErrorReply(400, "invalid_request_error", "bad")]) as api:
        raw = anthropic.Anthropic(base_url=api.url, api_key="t", max_retries=0, open_telemetry=False)
        client = capture(raw, BrokenSink())
        assert _create(client).id == "msg_c1"
        with pytest.raises(anthropic.BadRequestError):
            _create(client)  # the application's own errors still reach it
        assert client.flush(5)
    assert client.writer.failed == 2 and client.writer.written == 0
    assert "ConnectionError" in caplog.text and "Paris" not in caplog.text
