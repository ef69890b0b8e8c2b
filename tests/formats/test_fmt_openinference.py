# ruff: noqa: E501  (fixture data is kept one record per line, as sources write it)
"""OpenInference (openinference-instrumentation-anthropic), its RETRIEVER / TOOL
spans and annotations, Phoenix's span export, and OpenLLMetry
(opentelemetry-instrumentation-anthropic) in current and legacy attributes."""

from __future__ import annotations

import json

import pytest

from pipelines.ingest.objects import SourceObject, ingest_objects
from tests.formats.conftest import (
    ANSWER,
    QUESTION,
    SNAPSHOT,
    SYSTEM,
    TOOL_ID,
    client_for,
    messages_of,
    normalize,
    weather_exchange,
)


@pytest.fixture
def openinference(otel):
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    yield
    instrumentor.uninstrument()


def test_openinference_llm_spans(api, otel, openinference):
    weather_exchange(client_for(api))
    fmt, out = normalize(otel.span_bytes())
    first, second = sorted(out.calls, key=lambda c: c["occurred_at"])
    assert fmt == "otlp_json" and first["source_format"] == "openinference"
    # input.value holds the kwargs: the request is rebuilt exactly as the stub received it
    assert json.loads(first["request_json"]) == api.requests[0].body
    assert json.loads(second["request_json"]) == api.requests[1].body
    assert first["params"]["temperature"] == 0.2 and first["params"]["stop_sequences"] == ["\n\nHuman:"]
    assert first["system_text"] == SYSTEM and first["user_id"] is None
    assert [(t["name"], t["description"]) for t in first["tool_definitions"]] == [
        ("get_weather", "Current weather for a city")
    ]
    assert messages_of(second) == [
        ("user", [("text", QUESTION, None, None)]),
        (
            "assistant",
            [("text", "Let me check.", None, None), ("tool_call", "get_weather", TOOL_ID, '{"city":"Paris"}')],
        ),
        ("user", [("tool_result", "15 C, sunny", TOOL_ID, None)]),
    ]
    assert (first["request_model"], first["response_model"]) == ("claude-sonnet-4-5", SNAPSHOT)
    assert (first["finish_reason"], first["stop_reason_native"]) == ("tool_call", "tool_use")
    assert first["usage"]["input_tokens"] == 455 and first["usage"]["cache_write_input_tokens"] == 1024
    assert second["usage"]["cache_read_input_tokens"] == 1024 and second["output_text"] == ANSWER
    assert first["response_id"] == "msg_turn1" and second["response_id"] == "msg_turn2"


def test_openinference_retriever_tool_and_annotations_and_phoenix_export(otel):
    tracer = otel.tracer_provider.get_tracer("openinference.app")
    with tracer.start_as_current_span("agent") as agent:
        agent.set_attributes({"openinference.span.kind": "AGENT", "session.id": "sess-42", "user.id": "u_123"})
        with tracer.start_as_current_span("retrieve") as r:
            r.set_attributes({
                "openinference.span.kind": "RETRIEVER", "input.value": "weather policy Paris",
                "retrieval.documents.0.document.id": "kb-17#3", "retrieval.documents.0.document.score": 0.83,
                "retrieval.documents.0.document.content": "Paris forecasts come from Meteo-France.",
                "retrieval.documents.0.document.metadata": '{"index":"kb-v2026-11-29"}',
                "retrieval.documents.1.document.id": "kb-04#1", "retrieval.documents.1.document.score": 0.71,
                "retrieval.documents.1.document.content": "Temperatures are reported in Celsius.",
            })  # fmt: skip
        with tracer.start_as_current_span("get_weather") as t:
            t.set_attributes({
                "openinference.span.kind": "TOOL", "tool.name": "get_weather", "tool.id": TOOL_ID,
                "input.value": '{"city": "Paris"}', "input.mime_type": "application/json", "output.value": "15 C, sunny",
            })  # fmt: skip
        with tracer.start_as_current_span("messages.create") as llm:
            llm.set_attributes({
                "openinference.span.kind": "LLM", "llm.provider": "anthropic",
                "llm.request.model_name": "claude-sonnet-4-5", "llm.model_name": SNAPSHOT,
                "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": SYSTEM,
                "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": QUESTION,
                "llm.input_messages.2.message.role": "tool", "llm.input_messages.2.message.tool_call_id": TOOL_ID,
                "llm.input_messages.2.message.content": "15 C, sunny",
                "llm.invocation_parameters": '{"max_tokens": 256, "temperature": 0.2}',
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.contents.0.message_content.type": "text",
                "llm.output_messages.0.message.contents.0.message_content.text": ANSWER,
                "llm.finish_reason": "end_turn", "llm.token_count.prompt": 1836, "llm.token_count.completion": 14,
                "llm.token_count.prompt_details.cache_read": 1024, "llm.token_count.total": 1850,
                "session.id": "sess-42", "user.id": "u_123",
                "annotations.0.annotation.name": "helpfulness", "annotations.0.annotation.score": 1,
                "annotations.0.annotation.label": "helpful", "annotations.0.annotation.annotator_kind": "LLM",
                "annotations.0.annotation.explanation": "Answers the question.",
            })  # fmt: skip
    from datetime import UTC, datetime

    data = otel.span_bytes()
    batch = ingest_objects(
        [SourceObject("oi/traces.json", "oi/traces.json", "e", len(data), datetime.now(UTC), data)],
        datetime.now(UTC).date(), "run", datetime.now(UTC),
    )  # fmt: skip
    (call,) = batch.calls
    assert (call["session_id"], call["user_id"]) == ("sess-42", "u_123")
    assert call["system_text"] == SYSTEM and messages_of(call)[1] == (
        "tool",
        [("tool_result", "15 C, sunny", TOOL_ID, None)],
    )
    assert call["params"]["max_tokens"] == 256 and call["params"]["temperature"] == 0.2
    assert (call["finish_reason"], call["stop_reason_native"], call["output_text"]) == ("stop", "end_turn", ANSWER)
    assert call["usage"]["input_tokens"] == 812 and call["usage"]["total_tokens"] == 1850
    docs = call["retrieval"]["documents"]
    assert [(d["doc_id"], d["score"], d["text"][:5]) for d in docs] == [
        ("kb-17#3", 0.83, "Paris"),
        ("kb-04#1", 0.71, "Tempe"),
    ]
    assert call["retrieval"]["index_snapshot"] == "kb-v2026-11-29"
    assert call["retrieval"]["query_text"] == "weather policy Paris"
    (tool,) = call["tool_executions"]
    assert (tool["tool_call_id"], tool["arguments_json"], tool["result_json"]) == (
        TOOL_ID,
        '{"city":"Paris"}',
        '"15 C, sunny"',
    )
    (fb,) = call["feedback"]
    assert (fb["name"], fb["value_number"], fb["value_string"], fb["source"]) == (
        "helpfulness",
        1.0,
        "helpful",
        "openinference:llm",
    )
    assert "intermediate_observations" not in call["capture_missing"]

    # Phoenix's export of the same spans: unflattened columns, one row per span
    rows = []
    for s in otel.spans.get_finished_spans():
        row = {
            "name": s.name, "span_kind": s.attributes.get("openinference.span.kind"),
            "context.trace_id": format(s.context.trace_id, "032x"), "context.span_id": format(s.context.span_id, "016x"),
            "parent_id": format(s.parent.span_id, "016x") if s.parent else None,
            "start_time": datetime.fromtimestamp(s.start_time / 1e9, UTC).isoformat(),
            "end_time": datetime.fromtimestamp(s.end_time / 1e9, UTC).isoformat(), "status_code": "OK",
        }  # fmt: skip
        for key, value in s.attributes.items():
            row[f"attributes.{key}"] = list(value) if isinstance(value, tuple) else value
        rows.append(row)
    export = "\n".join(json.dumps(r) for r in rows).encode()
    fmt, out = normalize(export, key="phoenix/2026/11/30/spans.jsonl")
    assert fmt == "phoenix"
    (phoenix_call,) = out.calls
    assert phoenix_call["call_id"] == call["call_id"], "one span exported two ways is one call"
    assert phoenix_call["messages"] == call["messages"] and phoenix_call["usage"] == call["usage"]


@pytest.fixture
def openllmetry(otel):
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider, logger_provider=otel.logger_provider)
    yield
    instrumentor.uninstrument()


def test_openllmetry_current_attributes(api, otel, openllmetry):
    weather_exchange(client_for(api))
    _, out = normalize(otel.span_bytes())
    first, second = sorted(out.calls, key=lambda c: c["occurred_at"])
    assert first["source_format"] == "openllmetry"
    assert first["system_text"] == SYSTEM and first["params"]["max_tokens"] == 256
    # its tool definitions are in Anthropic's shape (input_schema): read all the same
    assert json.loads(first["tool_definitions"][0]["schema_json"])["required"] == ["city"]
    # gen_ai.usage.cache_creation.input_tokens is the older alias of cache_write
    assert first["usage"]["cache_write_input_tokens"] == 1024 and first["usage"]["input_tokens"] == 455
    assert first["usage"]["total_tokens"] == 1531
    assert messages_of(second)[2] == ("user", [("tool_result", "15 C, sunny", TOOL_ID, None)])
    assert (second["finish_reason"], second["output_text"]) == ("stop", ANSWER)
    assert (first["request_model"], first["response_model"], first["response_id"]) == (
        "claude-sonnet-4-5",
        SNAPSHOT,
        "msg_turn1",
    )


def test_openllmetry_legacy_indexed_attributes(otel):
    # older traceloop releases flattened content into indexed attributes (spec sheet, sample D3)
    tracer = otel.tracer_provider.get_tracer("opentelemetry.instrumentation.anthropic", "0.33.0")
    with tracer.start_as_current_span("anthropic.chat") as span:
        span.set_attributes({
            "llm.request.type": "chat", "gen_ai.system": "Anthropic",
            "gen_ai.request.model": "claude-3-5-sonnet", "gen_ai.request.max_tokens": 256, "gen_ai.request.temperature": 0.2,
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": SYSTEM,
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": QUESTION,
            "llm.request.functions.0.name": "get_weather", "llm.request.functions.0.description": "Current weather for a city",
            "llm.request.functions.0.input_schema": '{"type":"object","properties":{"city":{"type":"string"}}}',
            "gen_ai.response.model": "claude-3-5-sonnet-20241022", "gen_ai.response.id": "msg_legacy",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Let me check.",
            "gen_ai.completion.0.finish_reason": "tool_use",
            "gen_ai.completion.0.tool_calls.0.id": TOOL_ID, "gen_ai.completion.0.tool_calls.0.name": "get_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
            "gen_ai.usage.prompt_tokens": 455, "gen_ai.usage.completion_tokens": 52, "llm.usage.total_tokens": 507,
            "traceloop.association.properties.user_id": "u_123", "traceloop.association.properties.session_id": "sess-42",
            "traceloop.prompt.key": "weather-system", "traceloop.prompt.version": 3,
            "traceloop.custom.unmapped": "kept",
        })  # fmt: skip
    _, out = normalize(otel.span_bytes())
    (call,) = out.calls
    assert call["source_format"] == "openllmetry" and call["provider"] == "anthropic"
    assert call["system_text"] == SYSTEM and messages_of(call) == [("user", [("text", QUESTION, None, None)])]
    assert [(t["name"], t["description"]) for t in call["tool_definitions"]] == [
        ("get_weather", "Current weather for a city")
    ]
    parts = call["output_messages"][0]["parts"]
    assert [(p["type"], p.get("tool_call_id"), p.get("arguments_json")) for p in parts] == [
        ("text", None, None), ("tool_call", TOOL_ID, '{"city":"Paris"}'),
    ]  # fmt: skip
    assert (call["finish_reason"], call["stop_reason_native"]) == ("tool_call", "tool_use")
    assert call["params"]["temperature"] == 0.2 and call["params"]["max_tokens"] == 256
    assert call["usage"]["input_tokens"] == 455 and call["usage"]["total_tokens"] == 507
    assert (call["user_id"], call["session_id"], call["template_id"], call["template_version"]) == (
        "u_123", "sess-42", "weather-system", "3",
    )  # fmt: skip
    assert (call["request_model"], call["response_model"], call["response_id"]) == (
        "claude-3-5-sonnet", "claude-3-5-sonnet-20241022", "msg_legacy",
    )  # fmt: skip
    assert json.loads(call["extra_json"])["attributes"]["traceloop.custom.unmapped"] == "kept"
